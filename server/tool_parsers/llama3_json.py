"""The `llama3_json` format (Llama 3.1/3.2/3.3 with JSON tool calling): an output that is calls
from its start, after optional whitespace and an optional `<|python_tag|>`:

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

Each call is one JSON object read as a `CallObject` with the arguments keys `parameters` and
`arguments` (the first present counts); calls are separated by `;` with optional whitespace
around it. An output that does not begin with a call that way is all content, whitespace and
tag included; an object that turns out to be no call before its name is known is content,
from just past the previous call (separator included) or from the start. A call opens once
its name is known and its arguments stream as written; an object the output ends inside is
a call with the arguments written so far. After the last call, whitespace and one `;` are
dropped; anything else there is content, from just past the call. Streaming holds back the
start of the output, and the text after a call, until its kind is known.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from server.tool_parsers.base import FunctionCall, PartialCall, Piece, ToolParser, new_call_id
from server.tool_parsers.call_object import CallObject

TAG = "<|python_tag|>"
ARGUMENT_KEYS = ("parameters", "arguments")


class _Place(Enum):
    START = "start"  # nothing decided yet
    CALL = "call"  # inside a call object
    AFTER_CALL = "after_call"  # just past a call's closing brace
    CONTENT = "content"  # everything from here on is content


class _Step(Enum):
    WAIT = "wait"  # more text is needed to tell
    CONTENT = "content"  # no call here: the rest is content


class Llama3JsonToolParser(ToolParser):
    """JSON calls separated by `;` from the start of the output, or else plain content."""

    def __init__(self, make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(make_id)
        self._place = _Place.START
        self._call = CallObject(ARGUMENT_KEYS)
        self._raw = ""  # text read since the last call while the next one's name is unknown

    def _scan(self, text: str, final: bool) -> tuple[list[Piece], int]:
        pieces: list[Piece] = []
        done = 0
        while self._place is not _Place.CONTENT:
            if self._place is _Place.CALL:
                done = self._read(text, done)
                if self._place is _Place.CALL and not final:
                    if self._call.name is not None:
                        pieces.append(PartialCall(self._call.name, self._call.arguments))
                    return pieces, done
                if self._call.name is None:
                    self._place = _Place.CONTENT  # no call: content from the raw text on
                    pieces.append(self._raw)
                    continue
                pieces.append(FunctionCall(self._call.name, self._call.final_arguments()))
                if self._place is _Place.CALL:  # cut by the end of the output
                    return pieces, len(text)
                continue
            if final and self._place is _Place.AFTER_CALL and _only_separator(text, done):
                return pieces, len(text)
            step = self._next_call(text, done, final)
            if step is _Step.WAIT:
                return pieces, done
            if step is _Step.CONTENT:
                self._place = _Place.CONTENT
            else:
                self._raw, done = text[done:step], step
                self._call, self._place = CallObject(ARGUMENT_KEYS), _Place.CALL
        pieces.append(text[done:])
        return pieces, len(text)

    def _read(self, text: str, done: int) -> int:
        """Feed the rest of `text` to the call object; return the index reached."""
        at = self._call.feed(text, done, len(text))
        self._raw = self._raw + text[done:at] if self._call.name is None else ""
        if self._call.failed:
            self._place = _Place.CONTENT
        elif self._call.done:
            self._place = _Place.AFTER_CALL
        return at

    def _next_call(self, text: str, done: int, final: bool) -> int | _Step:
        """The index of the `{` that begins the next call (after what may lead it:
        whitespace and the tag at the start, a `;` after a call), or the step to take when
        there is none."""
        at = _skip_space(text, done)
        if self._place is _Place.START:
            if text.startswith(TAG, at):
                at = _skip_space(text, at + len(TAG))
            elif not final and TAG.startswith(text[at:]):
                return _Step.WAIT
        elif text.startswith(";", at):
            at = _skip_space(text, at + 1)
        elif at < len(text):
            return _Step.CONTENT  # a call must be led by `;`
        if at == len(text):
            return _Step.CONTENT if final else _Step.WAIT
        return at if text[at] == "{" else _Step.CONTENT


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _only_separator(text: str, at: int) -> bool:
    """Whether `text[at:]` is whitespace around at most one `;`."""
    at = _skip_space(text, at)
    if text.startswith(";", at):
        at = _skip_space(text, at + 1)
    return at == len(text)
