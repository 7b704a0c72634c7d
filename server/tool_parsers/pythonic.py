"""The `pythonic` format (Llama 3.2 and Llama 4 pythonic tool calling, ToolACE): an output
that is, apart from leading whitespace, a Python list of calls with keyword arguments:

    [get_weather(city="Paris", unit="c"), get_time(zone=None)]

A call opens at `name(` (a plain name, not a Python keyword) and its arguments stream as
`PythonArguments` reads them (JSON, argument by argument). An output that does not begin
`[name(` is all content; once calls have opened, text after a call's `)` that does not go
on to `, name(` or `]` is content from just past that `)`, and so is anything after the
`]` (whitespace only: nothing). An output that ends inside a call gives the arguments
complete so far, and one that ends between calls (a `,` included) nothing more. Streaming
holds back the text from the output's start, or a call's `)`, until its kind is known.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from enum import Enum

from server.tool_parsers.base import FunctionCall, PartialCall, Piece, ToolParser, new_call_id
from server.tool_parsers.python_arguments import PythonArguments

_SPACE = re.compile(r"\s*")
_NAME = re.compile(r"[^\W\d]\w*")


class _Place(Enum):
    START = "start"  # nothing decided yet
    CALL = "call"  # inside a call's argument list
    AFTER_CALL = "after_call"  # just past a call's `)`
    CONTENT = "content"  # everything from here on is content


class _Step(Enum):
    WAIT = "wait"  # more text is needed to tell
    CONTENT = "content"  # no call here: the rest is content
    LIST_END = "list_end"  # the list's `]`: the rest is content
    END = "end"  # the output ends with no more calls


class PythonicToolParser(ToolParser):
    """`[f(a=1), g(b="x")]` as the output, or else plain content."""

    def __init__(self, make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(make_id)
        self._place = _Place.START
        self._name = ""
        self._arguments = PythonArguments()

    def _scan(self, text: str, final: bool) -> tuple[list[Piece], int]:
        pieces: list[Piece] = []
        done = 0
        while self._place is not _Place.CONTENT:
            if self._place is _Place.CALL:
                done = self._arguments.feed(text, done, len(text), final)
                if self._arguments.done:
                    pieces.append(FunctionCall(self._name, self._arguments.text))
                    self._place = _Place.AFTER_CALL
                    continue
                if final:
                    pieces.append(FunctionCall(self._name, self._arguments.text))
                    return pieces, len(text)
                pieces.append(PartialCall(self._name, self._arguments.text))
                return pieces, done
            what, at = self._next_call(text, done, final)
            if what is _Step.WAIT:
                return pieces, done
            if what is _Step.END:
                return pieces, len(text)
            if what is _Step.LIST_END:
                done = at
            if isinstance(what, _Step):
                self._place = _Place.CONTENT
            else:
                self._name, done = what, at
                self._arguments, self._place = PythonArguments(), _Place.CALL
        pieces.append(text[done:])
        return pieces, len(text)

    def _next_call(self, text: str, done: int, final: bool) -> tuple[str | _Step, int]:
        """What follows `done` (the output's start, or just past a call's `)`): the next
        call's name and the index past its `(`, LIST_END and the index past the `]`, or
        the step to take."""
        at = _SPACE.match(text, done).end()
        if self._place is _Place.START:
            if text.startswith("[", at):
                return self._call_at(text, _SPACE.match(text, at + 1).end(), final)
            return (_Step.WAIT if at == len(text) and not final else _Step.CONTENT), done
        if text.startswith(",", at):
            at = _SPACE.match(text, at + 1).end()
            if at < len(text) and text[at] != "]":
                return self._call_at(text, at, final)
        elif at < len(text) and text[at] != "]":
            return _Step.CONTENT, done  # a call must be led by `,`
        if at == len(text):
            return (_Step.END if final else _Step.WAIT), done
        return _Step.LIST_END, at + 1

    def _call_at(self, text: str, at: int, final: bool) -> tuple[str | _Step, int]:
        """`name(` at `at` (whitespace before the `(` allowed): the name and the index past
        the `(`; or WAIT while the text could still become one, else CONTENT."""
        name = _NAME.match(text, at)
        paren = _SPACE.match(text, name.end()).end() if name else at
        if paren == len(text):  # the name, or the space after it, may go on
            return (_Step.CONTENT if final else _Step.WAIT), at
        if name is None or text[paren] != "(" or keyword.iskeyword(name.group()):
            return _Step.CONTENT, at
        return name.group(), paren + 1
