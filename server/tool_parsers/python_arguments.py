"""A pythonic call's argument list, read as it is written (after the call's `(`, through its
`)`), as JSON object text: `{"a": 1` once `a=1` is complete (at the `,` or `)` after it),
`, "b": "x"` once `b="x"` is, `}` at the `)` (`{}` for no arguments).

An argument must be `key=value`, the key a plain name and the value a Python literal of
JSON's kinds: str, int, finite float, bool, None, and lists and str-keyed dicts of those (no
tuples, sets, bytes or complex); a repeated key is kept as written. From the first argument
that is not, the source of the rest of the list (from the `,` before it) passes through raw
and the text is not JSON. Arguments end at a `,` or `)` outside brackets and Python strings
(quoted by ' or ", single or tripled, a backslash escaping the next character).
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from typing import Any

from server.tool_parsers.canonical_json import dump_json

_KEYWORD = re.compile(r"\s*([^\W\d]\w*)\s*=(?!=)(.*)", re.S)
_OUTSIDE = re.compile(r"[^'\"()\[\]{},]+")  # characters that neither nest nor end anything
_IN_STRING = {"'": re.compile(r"[^'\\]+"), '"': re.compile(r'[^"\\]+')}


class PythonArguments:
    """One call's argument list fed in pieces (`feed`); `text` is its JSON text so far (what
    a cut there gives) and `done` whether its `)` has been read."""

    def __init__(self) -> None:
        self.text = ""
        self.done = False
        self._count = 0  # keyword arguments written
        self._segment = ""  # the source of the argument being read
        self._raw = False  # an argument was no keyword literal: the source passes through
        self._depth = 0  # brackets open outside strings
        self._quote = ""  # the open string's quote ("" outside strings)
        self._escaped = False  # in a string, just after a backslash

    def feed(self, text: str, at: int, end: int, final: bool) -> int:
        """Read `text[at:end]` through the closing `)`; return the index reached (short of
        `end` while a quote needs the characters after it to tell a triple quote, unless
        `final`)."""
        taken: list[str] = []  # the source read since the last argument ended
        while at < end and not self.done:
            if self._quote:
                reached = self._string(text, at, end, final, taken)
            else:
                reached = self._outside(text, at, end, final, taken)
            if reached == at:
                break  # waiting for more text
            at = reached
        self._take(taken)
        return at

    def _string(self, text: str, at: int, end: int, final: bool, taken: list[str]) -> int:
        if self._escaped:
            self._escaped = False
            taken.append(text[at])
            return at + 1
        run = _IN_STRING[self._quote[0]].match(text, at, end)
        if run:
            taken.append(run.group())
            return run.end()
        char = text[at]
        if char == "\\":
            self._escaped = True
        elif len(self._quote) == 1:
            self._quote = ""
        elif at + 3 > end and not final:
            return at
        elif text.startswith(self._quote, at, end):
            taken.append(self._quote)
            self._quote = ""
            return at + 3
        taken.append(char)
        return at + 1

    def _outside(self, text: str, at: int, end: int, final: bool, taken: list[str]) -> int:
        run = _OUTSIDE.match(text, at, end)
        if run:
            taken.append(run.group())
            return run.end()
        char = text[at]
        if char in "'\"":
            if at + 3 > end and not final:
                return at
            self._quote = char * 3 if text.startswith(char * 3, at, end) else char
            taken.append(self._quote)
            return at + len(self._quote)
        if self._depth == 0 and char in ",)":
            self._take(taken)
            self._end_argument(last=char == ")")
            return at + 1
        if char in "([{":
            self._depth += 1
        elif char in ")]}" and self._depth > 0:
            self._depth -= 1
        taken.append(char)
        return at + 1

    def _take(self, taken: list[str]) -> None:
        source = "".join(taken)
        taken.clear()
        if self._raw:
            self.text += source
        else:
            self._segment += source

    def _end_argument(self, last: bool) -> None:
        """An argument ended at a `,` (or, `last`, at the `)`)."""
        if not self._raw:
            pair = _keyword_json(self._segment)
            if pair is not None:
                self.text += (", " if self._count else "{") + pair
                self._count += 1
            elif not (last and not self._segment.strip()):  # `f()`, `f(a=1,)` are fine
                self.text += ("," if self._count else "") + self._segment
                self._raw = True
            self._segment = ""
        if not last:
            if self._raw:
                self.text += ","
            return
        self.done = True
        if not self._raw:
            self.text += "}" if self._count else "{}"


def _keyword_json(source: str) -> str | None:
    """`key=value` as JSON (`"key": value`), or None when it is not a keyword argument whose
    value is a literal of JSON's kinds."""
    parts = _KEYWORD.fullmatch(source)
    if parts is None or keyword.iskeyword(parts.group(1)):
        return None
    try:
        value = ast.literal_eval(ast.parse(f"({parts.group(2)}\n)", mode="eval").body)
        if not _json_kind(value):
            return None
        return dump_json(parts.group(1)) + ": " + dump_json(value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


def _json_kind(value: Any) -> bool:
    """Whether `value` is made only of what JSON can say (and so of what json.dumps writes as
    valid JSON)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_kind(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _json_kind(item) for key, item in value.items())
    return False
