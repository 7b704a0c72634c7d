"""The `hermes` format (Hermes 2 Pro, Qwen2.5, Qwen3): calls in `<tool_call>` blocks, any number,
with plain text before, between and after them, all of which is content.

    Let me look.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A block's body is one JSON object with a non-empty string `name` and an object `arguments`
(other keys ignored), whitespace around it allowed. A block whose body is not that, or a
`<tool_call>` with no `</tool_call>` after it, is content, markers included; a body runs to
the first `</tool_call>`. Streaming sends a call once its `</tool_call>` arrives, arguments in
one fragment; text that could begin `<tool_call>` is held back until it cannot.
"""

from __future__ import annotations

from server.tool_parsers.base import FunctionCall, ToolParser
from server.tool_parsers.json_calls import function_call
from server.tool_parsers.text_scan import partial_marker_len

START = "<tool_call>"
END = "</tool_call>"


class HermesToolParser(ToolParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks amid content."""

    def _scan(self, text: str, final: bool) -> tuple[list[str | FunctionCall], int]:
        pieces: list[str | FunctionCall] = []
        done = 0
        while True:
            start = text.find(START, done)
            if start < 0:
                held = 0 if final else partial_marker_len(text[done:], START)
                pieces.append(text[done : len(text) - held])
                return pieces, len(text) - held
            pieces.append(text[done:start])
            end = text.find(END, start + len(START))
            if end < 0:
                if final:
                    pieces.append(text[start:])
                    return pieces, len(text)
                return pieces, start
            done = end + len(END)
            call = function_call(text[start + len(START) : end], ("arguments",))
            pieces.append(call or text[start:done])
