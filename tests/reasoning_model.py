"""A tiny successor model (tests/tool_call_model.py) that thinks before its tool call, for
tests of reasoning through the doors: after the generation prompt it says
`<think> weather? </think>` and then the tool-call model's call. Its template shows each
message's content after its `reasoning_content` (as `<think> ... </think>`), a `tools` word
when tools are offered, and the generation prompt, after which `enable_thinking: false`
writes an empty `<think> </think>` (as Qwen3's does)."""

from __future__ import annotations

from tool_call_model import CALL_WORDS, build_successor_model

THINK_WORDS = ["<think>", "weather?", "</think>"]
REASONING = " weather? "  # the reasoning between the markers, as the word tokenizer decodes it
TEMPLATE = ("{% if tools %}tools {% endif %}{% for m in messages %}"
            "{% if m.reasoning_content %}<think> {{ m.reasoning_content }} </think> {% endif %}"
            "{{ m.content }} {% endfor %}{% if add_generation_prompt %}go"
            "{% if enable_thinking is defined and not enable_thinking %} <think> </think>"
            "{% endif %}{% endif %}")


def build_reasoning_model(path) -> None:
    """Write the checkpoint and its tokenizer to `path`."""
    build_successor_model(path, [*THINK_WORDS, *CALL_WORDS], TEMPLATE)
