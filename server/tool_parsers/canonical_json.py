"""Canonical JSON text, whole or incrementally: how tool-call arguments reach a client.

`dump_json(value)` is `json.dumps(value, ensure_ascii=False)` (", " and ": " separators,
non-ASCII kept as is) with each lone surrogate escaped (`\\ud800`), so the text always
encodes as UTF-8. `CanonicalJson` reads one JSON value fed in pieces and writes the same
text as the model writes it, prefix-monotone (what it writes for a prefix of the raw text is
a prefix of what it writes for any longer text): structural characters and separators at
once, whitespace dropped, a string character by character once each character (or escape
sequence; a high surrogate once its pair, or its lack, is known) is complete, a number or
literal once complete (`json.dumps` of its value; NaN, Infinity and numbers that overflow to
them are not JSON). Strict JSON as `json.loads` reads it; duplicate keys are kept as written
(json.loads would keep the last). From the first character that is not valid JSON on, the
rest of the value passes through raw (`RawValue`), and the text is then not valid JSON.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from server.tool_parsers.raw_value import RawValue

_SPACE = re.compile(r"[ \t\n\r]*")
_PLAIN = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]+')  # string characters written as they are
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_NUMBER_RUN = re.compile(r"[-+.0-9eE]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t"}
_SHORT_FORMS = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                "\t": "\\t"}
_CLOSER = {"{": "}", "[": "]"}


def dump_json(value: Any) -> str:
    """`value` (JSON-safe: no NaN or Infinity) as canonical JSON text."""
    return _SURROGATE.sub(_escape_surrogate, json.dumps(value, ensure_ascii=False))


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _escaped(char: str) -> str:
    """`char` as canonical JSON writes it inside a string."""
    if char in _SHORT_FORMS:
        return _SHORT_FORMS[char]
    if char < " " or "\ud800" <= char <= "\udfff":
        return f"\\u{ord(char):04x}"
    return char


def _number_text(token: str) -> str | None:
    """The canonical text of a JSON number token, or None when it is not a finite one."""
    parts = _NUMBER.fullmatch(token)
    if parts is None:
        return None
    try:
        if parts.group(1) is None and parts.group(2) is None:
            return str(int(token))
    except ValueError:  # more digits than Python converts
        return None
    value = float(token)
    return repr(value) if math.isfinite(value) else None


Reader = Callable[[str, int, int, list[str]], int]  # a state: reads on from `at`


class CanonicalJson:
    """One JSON value (an object when `want_object`: any other value is then not valid),
    fed in pieces by `feed`; `text` is the canonical text so far, `done` whether the value
    has ended, `valid` whether it has all been valid JSON, and `tail()` what a cut there
    adds (the raw text of an unfinished number, literal or escape).

    Its state is the method that reads what comes next (`_read`), each taking the text, the
    index to read from, the end, and the list the canonical text goes to, and returning the
    index reached."""

    def __init__(self, want_object: bool = False) -> None:
        self.want_object = want_object
        self.text = ""
        self.done = False
        self._read: Reader = self._value
        self._stack: list[str] = []  # the open containers, "{" or "["
        self._key = False  # the string being read is a key
        self._held = ""  # raw text of the token being read (number, literal, escape)
        self._high = ""  # raw escape of a high surrogate waiting for its pair
        self._raw: RawValue | None = None

    @property
    def valid(self) -> bool:
        return self._raw is None

    def tail(self) -> str:
        """The raw text read but not yet written (empty once done or raw)."""
        return self._high + self._held

    def feed(self, text: str, at: int = 0, end: int | None = None) -> int:
        """Read `text[at:end]` until the value ends; return the index reached (a number's
        end is known at the character after it, which is not read)."""
        end = len(text) if end is None else end
        out: list[str] = []
        while at < end and not self.done:
            at = self._read(text, at, end, out)
        if out:
            self.text += "".join(out)
        return at

    # ----- structure: whitespace first, then one character ----------------------------
    def _value(self, text: str, at: int, end: int, out: list[str]) -> int:
        at = skip_space(text, at, end)
        if at == end:
            return at
        char = text[at]
        if self.want_object and not self._stack and char != "{":
            return self._fail(at, out)
        if char in _CLOSER:
            self._stack.append(char)
            out.append(char)
            self._read = self._first_key if char == "{" else self._first_value
        elif char == '"':
            self._open_string(False, out)
        elif char == "-" or "0" <= char <= "9":
            self._read = self._number
            return at  # the number reads it
        elif char in _LITERALS:
            self._held = char
            self._read = self._literal
        else:
            return self._fail(at, out)
        return at + 1

    def _first_value(self, text: str, at: int, end: int, out: list[str]) -> int:
        """Just after `[`: a value or `]`."""
        at = skip_space(text, at, end)
        if at < end and text[at] == "]":
            self._close(out)
            return at + 1
        return self._value(text, at, end, out)

    def _first_key(self, text: str, at: int, end: int, out: list[str]) -> int:
        """Just after `{`: a key or `}`."""
        at = skip_space(text, at, end)
        if at < end and text[at] == "}":
            self._close(out)
            return at + 1
        return self._key_start(text, at, end, out)

    def _key_start(self, text: str, at: int, end: int, out: list[str]) -> int:
        at = skip_space(text, at, end)
        if at == end:
            return at
        if text[at] != '"':
            return self._fail(at, out)
        self._open_string(True, out)
        return at + 1

    def _colon(self, text: str, at: int, end: int, out: list[str]) -> int:
        at = skip_space(text, at, end)
        if at == end:
            return at
        if text[at] != ":":
            return self._fail(at, out)
        out.append(": ")
        self._read = self._value
        return at + 1

    def _next(self, text: str, at: int, end: int, out: list[str]) -> int:
        """After a value in a container: `,` or the container's closer."""
        at = skip_space(text, at, end)
        if at == end:
            return at
        char = text[at]
        if char == ",":
            out.append(", ")
            self._read = self._key_start if self._stack[-1] == "{" else self._value
        elif char == _CLOSER[self._stack[-1]]:
            self._close(out)
        else:
            return self._fail(at, out)
        return at + 1

    def _close(self, out: list[str]) -> None:
        out.append(_CLOSER[self._stack.pop()])
        self._after_value()

    def _after_value(self) -> None:
        if self._stack:
            self._read = self._next
        else:
            self.done = True

    # ----- tokens -----------------------------------------------------------------------
    def _open_string(self, key: bool, out: list[str]) -> None:
        out.append('"')
        self._key = key
        self._read = self._string

    def _string(self, text: str, at: int, end: int, out: list[str]) -> int:
        if self._high and text[at] != "\\":
            self._flush_high(out)
        plain = _PLAIN.match(text, at, end)
        if plain:
            out.append(plain.group())
            return plain.end()
        char = text[at]
        if char == '"':
            out.append('"')
            if self._key:
                self._read = self._colon
            else:
                self._after_value()
        elif char == "\\":
            self._held = char
            self._read = self._escape
        elif char < " ":
            return self._fail(at, out)
        else:
            out.append(_escaped(char))  # a surrogate character
        return at + 1

    def _escape(self, text: str, at: int, end: int, out: list[str]) -> int:
        char = text[at]
        held = self._held + char
        if len(held) == 2 and char != "u":
            if char not in _SIMPLE_ESCAPES:
                return self._fail(at, out)
            self._flush_high(out)
            out.append(_escaped(_SIMPLE_ESCAPES[char]))
            self._held = ""
            self._read = self._string
            return at + 1
        if len(held) > 2 and char not in _HEX:
            return self._fail(at, out)
        self._held = held
        if len(held) < 6:
            return at + 1
        code = int(held[2:], 16)
        self._held = ""
        self._read = self._string
        if self._high:
            high = int(self._high[2:], 16)
            if 0xDC00 <= code <= 0xDFFF:
                self._high = ""
                out.append(chr(0x10000 + ((high - 0xD800) << 10) + code - 0xDC00))
                return at + 1
            self._flush_high(out)
        if 0xD800 <= code <= 0xDBFF:
            self._high = held
        else:
            out.append(_escaped(chr(code)))
        return at + 1

    def _flush_high(self, out: list[str]) -> None:
        """The waiting high surrogate has no pair: write it alone."""
        if self._high:
            out.append(_escaped(chr(int(self._high[2:], 16))))
            self._high = ""

    def _number(self, text: str, at: int, end: int, out: list[str]) -> int:
        run = _NUMBER_RUN.match(text, at, end)
        self._held += run.group()
        if run.end() == end:
            return end  # more digits may follow
        canonical = _number_text(self._held)
        if canonical is None:
            return self._fail(run.end(), out)
        out.append(canonical)
        self._held = ""
        self._after_value()
        return run.end()

    def _literal(self, text: str, at: int, end: int, out: list[str]) -> int:
        word = _LITERALS[self._held[0]]
        if text[at] != word[len(self._held)]:
            return self._fail(at, out)
        self._held += text[at]
        if len(self._held) == len(word):
            out.append(word)
            self._held = ""
            self._after_value()
        return at + 1

    # ----- not JSON ---------------------------------------------------------------------
    def _fail(self, at: int, out: list[str]) -> int:
        """The character at `at` is not valid JSON here: the held raw text and the rest of
        the value pass through from now on; return `at` (the raw pass reads on from there)."""
        braces = bool(self._stack) and self._stack[0] == "{"
        in_string = self._read in (self._string, self._escape)
        self._raw = RawValue(self._stack.count("{") if braces else len(self._stack),
                             brackets=not braces, in_string=in_string)
        self._read = self._passed_raw
        held, self._high, self._held = self._high + self._held, "", ""
        self._raw.feed(held, 0, len(held), out)
        self.done = self._raw.done
        return at

    def _passed_raw(self, text: str, at: int, end: int, out: list[str]) -> int:
        assert self._raw is not None
        at = self._raw.feed(text, at, end, out)
        self.done = self._raw.done
        return at


def skip_space(text: str, at: int, end: int) -> int:
    """The index of the first character in `text[at:end]` that is not JSON whitespace (or
    `end`)."""
    if at < end and text[at] in " \t\n\r":
        return _SPACE.match(text, at, end).end()
    return at
