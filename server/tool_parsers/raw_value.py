"""The rest of a JSON value that is not valid JSON, passed through as written: what a tool
call's arguments become once the model writes something `CanonicalJson` cannot read.

Its end is found by counting openers and closers outside JSON strings (a backslash escapes
the next character inside one): the value ends with the closer that brings the count to
zero (included), or, at count zero, just before a `,`, `}` or `]` (the container's).
"""

from __future__ import annotations

import re

_IN_STRING = re.compile(r'[^"\\]+')
_PLAIN = re.compile(r'[^"{}\[\], \t\n\r]+')
_SPACES = re.compile(r"[ \t\n\r]+")


class RawValue:
    """Raw JSON text fed in pieces until its value ends. `depth`: the unclosed containers
    already read; `brackets`: whether `[`/`]` count as well as braces (braces only suit an
    object, whose inner brackets a model may leave unbalanced); `in_string`: whether the
    text starts inside a string. Whitespace outside strings is held until more of the value
    follows, so a value never ends with it."""

    def __init__(self, depth: int, brackets: bool, in_string: bool = False) -> None:
        self.depth = depth
        self.brackets = brackets
        self.in_string = in_string
        self.done = False
        self._escaped = False  # inside a string, just after a backslash
        self._space = ""  # whitespace held outside strings

    def feed(self, text: str, at: int, end: int, out: list[str]) -> int:
        """Pass `text[at:end]` to `out` up to the value's end; return the index reached."""
        while at < end and not self.done:
            if self.in_string:
                at = self._string(text, at, end, out)
                continue
            spaces = _SPACES.match(text, at, end)
            if spaces:
                self._space += spaces.group()
                at = spaces.end()
                continue
            char = text[at]
            closer = char == "}" or (self.brackets and char == "]")
            if self.depth == 0 and (char == "," or char in "}]"):
                self.done = True  # the container's: not the value's
                return at
            out.append(self._space)
            self._space = ""
            plain = _PLAIN.match(text, at, end)
            if plain:
                out.append(plain.group())
                at = plain.end()
                continue
            out.append(char)
            at += 1
            if char == '"':
                self.in_string = True
            elif char == "{" or (self.brackets and char == "["):
                self.depth += 1
            elif closer:
                self.depth -= 1
                self.done = self.depth == 0
        return at

    def _string(self, text: str, at: int, end: int, out: list[str]) -> int:
        if self._escaped:
            self._escaped = False
            out.append(text[at])
            return at + 1
        run = _IN_STRING.match(text, at, end)
        if run:
            out.append(run.group())
            return run.end()
        char = text[at]
        out.append(char)
        if char == "\\":
            self._escaped = True
        else:
            self.in_string = False
        return at + 1
