"""Reasoning output parsers under vLLM's `--reasoning-parser` names: each splits a model's
output (whole, or streamed as deltas) into reasoning and content; see `base.ReasoningParser`
for the contract, each module for the exact format, and `vocabulary` for the startup check
that the model's tokenizer has the format's markers."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from server.reasoning_parsers.base import CONTENT, REASONING, ReasoningParser
from server.reasoning_parsers.think import ThinkReasoningParser

# vLLM's qwen3 and deepseek_r1 split text the same way (server/reasoning_parsers/think.py).
REASONING_PARSERS: Mapping[str, type[ReasoningParser]] = MappingProxyType(
    {
        "deepseek_r1": ThinkReasoningParser,
        "qwen3": ThinkReasoningParser,
    }
)


def reasoning_parser_class(name: str) -> type[ReasoningParser]:
    """The parser class of format `name`; ValueError naming the supported names when there
    is no such format."""
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        supported = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; supported: {supported}") from None


__all__ = ["CONTENT", "REASONING", "REASONING_PARSERS", "ReasoningParser",
           "reasoning_parser_class"]
