"""The `<think>…</think>` format of Qwen3 and DeepSeek-R1 (vLLM's `qwen3` and `deepseek_r1`).

The output starts inside the reasoning: these models' chat templates may put `<think>` in the
prompt (DeepSeek-R1, Qwen3-2507 Thinking, Qwen3.5), so the output may hold only `</think>`.
The reasoning runs to the first `</think>`; the content is everything after it. `<think>`
markers inside the reasoning are dropped (so a model that writes its own `<think>` gives the
same split), and so are `</think>` markers inside the content; a `<think>` in the content is
content text. With markers missing:

- no `</think>` (output cut inside the reasoning, or no markers at all): all reasoning, no
  content;
- an empty block (`<think>\\n\\n</think>\\n\\nHi`): no reasoning, the content after it with its
  whitespace (`"\\n\\nHi"`);
- text before a `<think>` stays reasoning (as vLLM streams it; vLLM's deepseek_r1 drops it
  from a whole output, which no stream could match without holding all of it back).

A prompt that ends with `</think>` (whitespace aside) closed the reasoning: Qwen3's template
with `enable_thinking: false` writes an empty block there, so the output is all content (as
vLLM, which checks the prompt's tokens the same way).

With a `call_marker` (the request parses hermes tool calls: `<tool_call>`), an unclosed
reasoning ends where that marker begins, the call being content, as vLLM's qwen3 does for
models that call tools right from their reasoning; a marker inside a closed
`<think>…</think>` stays reasoning text. Which of the two it is shows only at the `</think>`
or at the end of the output, so a stream holds back everything from such a marker until
then.
"""

from __future__ import annotations

from server.reasoning_parsers.base import CONTENT, REASONING, Kind, ReasoningParser
from server.tool_parsers.text_scan import partial_marker_len

START = "<think>"
END = "</think>"


class ThinkReasoningParser(ReasoningParser):
    """Reasoning up to the first `</think>` (or a call marker no `</think>` follows),
    content after it (see the module docstring)."""

    markers = (START, END)

    def __init__(self, in_content: bool = False, call_marker: str | None = None) -> None:
        super().__init__(in_content, call_marker)
        self._in_reasoning = not in_content

    @classmethod
    def closes_reasoning(cls, prompt_tail: str) -> bool:
        return prompt_tail.rstrip().endswith(END)

    def _scan(self, text: str, final: bool) -> tuple[list[tuple[Kind, str]], int]:
        pieces: list[tuple[Kind, str]] = []
        used = 0
        while self._in_reasoning:
            cut = self._unclosed_call(text, used)
            found = [(at, m) for m in (START, END)
                     if (at := text.find(m, used, len(text) if cut < 0 else cut)) >= 0]
            if found:
                at, marker = min(found)
                pieces.append((REASONING, text[used:at]))
                used = at + len(marker)
                self._in_reasoning = marker != END
            elif cut >= 0:
                pieces.append((REASONING, text[used:cut]))
                if not final:  # a </think> may still come: held from the marker on
                    return pieces, cut
                used, self._in_reasoning = cut, False  # the call is content
            else:
                rest = text[used:]
                markers = (START, END, self.call_marker) if self.call_marker else (START, END)
                held = 0 if final else max(partial_marker_len(rest, m) for m in markers)
                pieces.append((REASONING, rest[:len(rest) - held]))
                return pieces, len(text) - held
        while (at := text.find(END, used)) >= 0:
            pieces.append((CONTENT, text[used:at]))
            used = at + len(END)
        rest = text[used:]
        held = 0 if final else partial_marker_len(rest, END)
        pieces.append((CONTENT, rest[:len(rest) - held]))
        return pieces, len(text) - held

    def _unclosed_call(self, text: str, start: int) -> int:
        """Where the first call marker from `start` on begins when no `</think>` follows it
        in `text` (-1: none, or one inside a reasoning that closes)."""
        if self.call_marker is None:
            return -1
        at = text.find(self.call_marker, start)
        return at if at >= 0 and text.find(END, at) < 0 else -1
