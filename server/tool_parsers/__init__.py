"""Tool-call output parsers, one per format, under vLLM's `--tool-call-parser` names: each turns
a model's output (whole, or streamed as deltas) into content and OpenAI tool calls; see
`base.ToolParser` for the contract and each module for the exact format it accepts."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from server.tool_parsers.base import ParsedOutput, ToolCall, ToolParser
from server.tool_parsers.hermes import HermesToolParser
from server.tool_parsers.llama3_json import Llama3JsonToolParser
from server.tool_parsers.pythonic import PythonicToolParser

TOOL_PARSERS: Mapping[str, type[ToolParser]] = MappingProxyType(
    {
        "hermes": HermesToolParser,
        "llama3_json": Llama3JsonToolParser,
        "pythonic": PythonicToolParser,
    }
)


def make_tool_parser(name: str) -> ToolParser:
    """A fresh parser for format `name` (random call ids); ValueError naming the supported
    names when there is no such format."""
    try:
        parser = TOOL_PARSERS[name]
    except KeyError:
        supported = ", ".join(sorted(TOOL_PARSERS))
        raise ValueError(f"unknown tool call parser {name!r}; supported: {supported}") from None
    return parser()


__all__ = ["TOOL_PARSERS", "ParsedOutput", "ToolCall", "ToolParser", "make_tool_parser"]
