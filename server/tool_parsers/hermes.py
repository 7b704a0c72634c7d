"""The `hermes` format (Hermes 2 Pro, Qwen2.5, Qwen3): calls in `<tool_call>` blocks, any number,
with plain text before, between and after them, all of which is content.

    Let me look.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A block's body, which runs to the first `</tool_call>` (or to the end of the output: the last
block may be unterminated), is one JSON object, whitespace around it allowed, read as a
`CallObject` with the arguments key `arguments`. It is a call once the object's `name` is
known: the call opens then, and its arguments stream as the model writes them (held until
the name is known when they come first). A body that is not such an object before its name
is known is content, markers included (as on vLLM, whose streaming sends a name once it is
complete). A body cut short (by `</tool_call>` or by the end of the output) gives the
arguments written so far; what follows the object in its block is dropped. Text that could
begin `<tool_call>` is held back until it cannot; inside a body, text that could begin
`</tool_call>` is.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from server.tool_parsers.base import FunctionCall, PartialCall, Piece, ToolParser, new_call_id
from server.tool_parsers.call_object import CallObject
from server.tool_parsers.text_scan import partial_marker_len

START = "<tool_call>"
END = "</tool_call>"
ARGUMENT_KEYS = ("arguments",)


class _Block(Enum):
    NONE = "none"  # outside a block
    READ = "read"  # reading the body's call object
    CONTENT = "content"  # no call: the block is content, to its end marker
    DROP = "drop"  # after the call's object: dropped, to the end marker


class HermesToolParser(ToolParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks amid content."""

    call_marker = START

    def __init__(self, make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(make_id)
        self._block = _Block.NONE
        self._call = CallObject(ARGUMENT_KEYS)
        self._raw = ""  # the block's text read while its name is unknown (content if no call)

    def _scan(self, text: str, final: bool) -> tuple[list[Piece], int]:
        pieces: list[Piece] = []
        done = 0
        while True:
            if self._block is _Block.NONE:
                start = text.find(START, done)
                if start < 0:
                    held = 0 if final else partial_marker_len(text[done:], START)
                    pieces.append(text[done : len(text) - held])
                    return pieces, len(text) - held
                pieces.append(text[done:start])
                done = start + len(START)
                self._block, self._call, self._raw = _Block.READ, CallObject(ARGUMENT_KEYS), START
                continue
            end = text.find(END, done)
            limit = end if end >= 0 else (
                len(text) if final else len(text) - partial_marker_len(text[done:], END))
            if self._block is _Block.READ:
                done = self._read(text, done, limit)
                if self._block is _Block.READ:
                    if end < 0 and not final:  # the body goes on
                        if self._call.name is not None:
                            pieces.append(PartialCall(self._call.name, self._call.arguments))
                        return pieces, done
                    self._block = _Block.CONTENT if self._call.name is None else _Block.DROP
                if self._block is _Block.DROP:  # the call's object is over, or cut short
                    pieces.append(FunctionCall(self._call.name, self._call.final_arguments()))
                continue
            if end < 0:
                if self._block is _Block.CONTENT:
                    self._raw += text[done:limit]
                    if final:
                        pieces.append(self._raw)
                return pieces, limit
            if self._block is _Block.CONTENT:
                pieces.append(self._raw + text[done : end + len(END)])
            done = end + len(END)
            self._block, self._raw = _Block.NONE, ""

    def _read(self, text: str, done: int, limit: int) -> int:
        """Feed the body up to `limit` to the call object; return the index reached."""
        at = self._call.feed(text, done, limit)
        if self._call.name is None:
            self._raw += text[done:at]
        else:
            self._raw = ""
        if self._call.failed:
            self._block = _Block.CONTENT
        elif self._call.done:
            self._block = _Block.DROP
        return at
