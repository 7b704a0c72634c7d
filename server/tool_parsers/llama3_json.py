"""The `llama3_json` format (Llama 3.1/3.2/3.3 with JSON tool calling): an output that is calls
from its start, after optional whitespace and an optional `<|python_tag|>`:

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

Each call is one JSON object with a non-empty string `name` and exactly one of `parameters` or
`arguments` holding an object (other keys ignored); calls are separated by `;` with optional
whitespace around it. An output that does not begin with a call that way is all content,
whitespace and tag included. After the last call, whitespace and one `;` are dropped; anything
else there is content, from just past the call (separator included). Streaming sends each call
as soon as its object closes, and holds back the start of the output, and the text after a
call, until its kind is known (an object that never closes is held to the end).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from server.tool_parsers.base import FunctionCall, ToolParser, new_call_id
from server.tool_parsers.json_calls import function_call
from server.tool_parsers.text_scan import object_end

TAG = "<|python_tag|>"
ARGUMENT_KEYS = ("parameters", "arguments")


class _Place(Enum):
    START = "start"  # nothing decided yet
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

    def _scan(self, text: str, final: bool) -> tuple[list[str | FunctionCall], int]:
        pieces: list[str | FunctionCall] = []
        done = 0
        while self._place is not _Place.CONTENT:
            if final and self._place is _Place.AFTER_CALL and _only_separator(text, done):
                return pieces, len(text)
            step = self._next_call(text, done, final)
            if step is _Step.WAIT:
                return pieces, done
            if step is _Step.CONTENT:
                self._place = _Place.CONTENT
            else:
                call, done = step
                pieces.append(call)
                self._place = _Place.AFTER_CALL
        pieces.append(text[done:])
        return pieces, len(text)

    def _next_call(self, text: str, done: int, final: bool) -> tuple[FunctionCall, int] | _Step:
        """The call at `done` (after what may lead it: whitespace and the tag at the start, a
        `;` after a call) and the index past it, or the step to take when there is none."""
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
        if text[at] != "{":
            return _Step.CONTENT
        end = object_end(text, at)
        if end is None:
            return _Step.CONTENT if final else _Step.WAIT
        call = function_call(text[at:end], ARGUMENT_KEYS)
        return _Step.CONTENT if call is None else (call, end)


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
