"""Limits on client-chosen identifiers (program, call and thread ids, tenant names), the
short form in which error messages echo one, and the error of a call id in use (torch-free:
the router raises it too)."""

from __future__ import annotations

MAX_ID_BYTES = 128
ECHO_CHARS = 32  # an error message shows at most this much of a bad or unknown id


def short(value: object) -> str:
    """`value` for an error message: its repr, cut to ECHO_CHARS characters."""
    if isinstance(value, str) and len(value) > ECHO_CHARS:
        return repr(value[:ECHO_CHARS]) + "..."
    return repr(value)


def check_id(field: str, value: object) -> None:
    """ValueError naming `field` unless `value` is 1 to MAX_ID_BYTES printable ASCII
    characters (letters, digits, punctuation; no spaces or control characters)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field}: must be a non-empty string, got {short(value)}")
    if len(value) > MAX_ID_BYTES or not all("!" <= c <= "~" for c in value):
        raise ValueError(f"{field}: must be at most {MAX_ID_BYTES} printable ASCII characters "
                         f"without spaces, got {short(value)} ({len(value)} characters)")


class DuplicateCallError(ValueError):
    """A call id (`args[0]`) that is already in use (live, or finished and not yet popped)."""

    def __str__(self) -> str:
        return f"call_id {short(self.args[0])} is already in use"
