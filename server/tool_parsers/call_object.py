"""One JSON call object, `{"name": "f", <arguments key>: {...}}`, read as it is written:
its name as soon as the name's string is complete, its arguments (`CanonicalJson` of the
value of the first of the arguments keys) as far as they go.

Before the name is known, anything that is not valid JSON, a name that is not a non-empty
string, or an object that ends without a name makes it no call (`failed`). Once the name is
known it is a call whatever follows: invalid arguments pass through raw to the end of their
value (see `CanonicalJson`), and invalid text between the object's members is skipped to
the object's closing brace. Other keys, a second name and a second arguments key are
ignored (their values read like any value).
"""

from __future__ import annotations

import json
from enum import Enum

from server.tool_parsers.canonical_json import CanonicalJson, skip_space
from server.tool_parsers.raw_value import RawValue


class _Expect(Enum):
    OPEN = "open"  # the object's `{`
    FIRST_KEY = "first_key"  # a key or `}`
    KEY = "key"
    COLON = "colon"
    VALUE = "value"
    NEXT = "next"  # `,` or `}`


class _Role(Enum):
    KEY = "key"
    NAME = "name"
    ARGUMENTS = "arguments"
    OTHER = "other"


class CallObject:
    """A call object fed in pieces (`feed`): `name` (None until known), `failed` (no call),
    `done` (its closing brace was read), the arguments text so far (`arguments`) and at its
    end (`final_arguments`)."""

    def __init__(self, argument_keys: tuple[str, ...]) -> None:
        self.argument_keys = argument_keys
        self.name: str | None = None
        self.failed = False
        self.done = False
        self._expect = _Expect.OPEN
        self._key = ""  # the key whose value is being read
        self._value: CanonicalJson | None = None  # the key or value being read
        self._role = _Role.KEY
        self._arguments: CanonicalJson | None = None
        self._skip: RawValue | None = None  # skipping malformed members to the object's end

    @property
    def arguments(self) -> str:
        """The arguments text so far ("" until their value starts)."""
        return self._arguments.text if self._arguments is not None else ""

    def final_arguments(self) -> str:
        """The arguments text if the output ended here: a cut value gives its canonical
        prefix and its held raw tail; an object that closed without arguments, "{}"."""
        if self._arguments is None:
            return "{}" if self.done else ""
        return self._arguments.text + self._arguments.tail()

    def feed(self, text: str, at: int, end: int) -> int:
        """Read `text[at:end]` until the object ends or fails; return the index reached
        (where it failed, the character that made it fail)."""
        while at < end and not (self.done or self.failed):
            if self._value is not None:
                at = self._read_value(self._value, text, at, end)
            elif self._skip is not None:
                at = self._skip.feed(text, at, end, [])
                self.done = self._skip.done
            else:
                at = self._structure(text, at, end)
        return at

    def _read_value(self, value: CanonicalJson, text: str, at: int, end: int) -> int:
        at = value.feed(text, at, end)
        if not value.valid and self.name is None:
            self.failed = True
        elif value.done:
            self._value = None
            self._took(value)
        return at

    def _took(self, value: CanonicalJson) -> None:
        """A key or value has been read whole."""
        if self._role is _Role.KEY:
            if value.valid:
                self._key = json.loads(value.text)
                self._expect = _Expect.COLON
            else:
                self._skip = RawValue(1, brackets=False)
            return
        if self._role is _Role.NAME:
            name = json.loads(value.text) if value.valid else None
            if not isinstance(name, str) or not name:
                self.failed = True
                return
            self.name = name
        self._expect = _Expect.NEXT

    def _structure(self, text: str, at: int, end: int) -> int:
        at = skip_space(text, at, end)
        if at == end:
            return at
        char, expect = text[at], self._expect
        if expect is _Expect.OPEN and char == "{":
            self._expect = _Expect.FIRST_KEY
        elif expect in (_Expect.FIRST_KEY, _Expect.KEY) and char == '"':
            self._start(_Role.KEY, want_object=False)
            return at  # the key's reader reads its quote
        elif expect is _Expect.COLON and char == ":":
            self._expect = _Expect.VALUE
        elif expect is _Expect.VALUE:
            self._start_value()
            return at
        elif expect is _Expect.NEXT and char == ",":
            self._expect = _Expect.KEY
        elif expect in (_Expect.FIRST_KEY, _Expect.NEXT) and char == "}":
            self.done = self.name is not None
            self.failed = not self.done
        elif self.name is None:
            self.failed = True
            return at
        else:
            self._skip = RawValue(1, brackets=False)
            return at
        return at + 1

    def _start_value(self) -> None:
        if self._key == "name" and self.name is None:
            self._start(_Role.NAME, want_object=False)
        elif self._key in self.argument_keys and self._arguments is None:
            self._start(_Role.ARGUMENTS, want_object=True)
            self._arguments = self._value
        else:
            self._start(_Role.OTHER, want_object=False)

    def _start(self, role: _Role, want_object: bool) -> None:
        self._role = role
        self._value = CanonicalJson(want_object)
