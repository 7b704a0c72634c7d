"""Scanning helpers for streams: how much of a text's end could begin a marker, and where a
JSON object that starts at a given place ends."""

from __future__ import annotations


def partial_marker_len(text: str, marker: str) -> int:
    """The length of the longest proper prefix of `marker` that `text` ends with (0 if none):
    the characters to hold back because more text could complete the marker."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


def object_end(text: str, start: int) -> int | None:
    """The index just past the `}` that closes the `{` at `text[start]`, counting braces outside
    JSON strings only; None when the text ends first. Says nothing about validity."""
    depth = 0
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None
