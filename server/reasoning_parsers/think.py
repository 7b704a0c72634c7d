"""The `<think>…</think>` format of Qwen3 and DeepSeek-R1 (vLLM's `qwen3` and `deepseek_r1`).

The output starts inside the reasoning: these models' chat templates may put `<think>` in the
prompt (DeepSeek-R1, Qwen3-2507 Thinking, Qwen3.5), so the output may hold only `</think>`.
The reasoning runs to the first `</think>`; the content is everything after it. `<think>`
markers inside the reasoning are dropped (so a model that writes its own `<think>` gives the
same split), and so are `</think>` markers inside the content; a `<think>` in the content is
content text. With markers missing:

- no `</think>` (output cut inside the reasoning, or no markers at all): all reasoning, no
  content;
- an empty block (`<think>\\n\\n</think>\\n\\nHi`, Qwen3 with thinking off): no reasoning, the
  content after it with its whitespace (`"\\n\\nHi"`);
- text before a `<think>` stays reasoning (as vLLM streams it; vLLM's deepseek_r1 drops it
  from a whole output, which no stream could match without holding all of it back).

Tool-call markup (`<tool_call>`) inside the reasoning is reasoning text: unlike vLLM's
qwen3, a `<tool_call>` does not end an unclosed reasoning (its implicit end, for Qwen3.5's
XML calls). And the output is always taken to start inside the reasoning, as vLLM's qwen3
does unless a request's `chat_template_kwargs` turn thinking off (not supported here).
"""

from __future__ import annotations

from server.reasoning_parsers.base import CONTENT, REASONING, Kind, ReasoningParser
from server.tool_parsers.text_scan import partial_marker_len

START = "<think>"
END = "</think>"


class ThinkReasoningParser(ReasoningParser):
    """Reasoning up to the first `</think>`, content after it (see the module docstring)."""

    markers = (START, END)

    def __init__(self) -> None:
        super().__init__()
        self._in_reasoning = True

    def _scan(self, text: str, final: bool) -> tuple[list[tuple[Kind, str]], int]:
        pieces: list[tuple[Kind, str]] = []
        used = 0
        while True:
            kind: Kind = REASONING if self._in_reasoning else CONTENT
            dropped = (START, END) if self._in_reasoning else (END,)
            found = [(at, m) for m in dropped if (at := text.find(m, used)) >= 0]
            if not found:
                rest = text[used:]
                held = 0 if final else max(partial_marker_len(rest, m) for m in dropped)
                pieces.append((kind, rest[:len(rest) - held]))
                return pieces, len(text) - held
            at, marker = min(found)
            pieces.append((kind, text[used:at]))
            used = at + len(marker)
            if marker == END:
                self._in_reasoning = False
