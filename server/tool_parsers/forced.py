"""A forced tool call (`tool_choice` "required" or a named function), as vLLM does it: the
output grammar is JSON the server turns into calls, whatever the model's own tool format, so
even a weak model emits calls whose arguments match their schemas.

- A named function: the output is its arguments, one JSON object of its `parameters` schema.
- "required": the output is a JSON array of `{"name": ..., "parameters": {...}}` objects,
  each naming an offered tool with arguments of its schema; at least one, and exactly one
  when `parallel_tool_calls` is false.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.structured.spec import StructuredOutput
from server.tool_parsers.base import FunctionCall, ToolParser, new_call_id
from server.tool_parsers.json_calls import dump_arguments, function_call_of, strict_json

ANY_ARGUMENTS: dict[str, Any] = {"type": "object"}


def tool_functions(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each offered function's name -> its `parameters` schema (any object when absent);
    ValueError naming `tools` for a tool without a function name."""
    functions = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError("tools: every tool needs a function with a name")
        functions[function["name"]] = function.get("parameters") or ANY_ARGUMENTS
    return functions


def forced_output(tools: list[dict[str, Any]], function: str | None,
                  parallel: bool) -> StructuredOutput:
    """The output grammar of a forced call of `function` (None: "required", any of
    `tools`); ValueError naming `tool_choice` when `function` is not offered."""
    functions = tool_functions(tools)
    if function is not None:
        if function not in functions:
            raise ValueError(f"tool_choice: function {function[:64]!r} is not among the tools")
        return StructuredOutput(json.dumps(functions[function]))
    options = [{"type": "object",
                "properties": {"name": {"const": name}, "parameters": schema},
                "required": ["name", "parameters"], "additionalProperties": False}
               for name, schema in functions.items()]
    array: dict[str, Any] = {"type": "array", "minItems": 1,
                             "items": options[0] if len(options) == 1 else {"anyOf": options}}
    if not parallel:
        array["maxItems"] = 1
    return StructuredOutput(json.dumps(array))


class ForcedCallParser(ToolParser):
    """Reads the output of `forced_output(..., function, ...)` back as calls. The whole
    output is held to the end (it is all calls); an output that is not the expected JSON
    (cut by `max_tokens`) is content. Unlike the registry's parsers, it takes the forced
    `function` (None: "required")."""

    def __init__(self, function: str | None,
                 make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(make_id)
        self.function = function

    def _fresh(self) -> ForcedCallParser:
        return ForcedCallParser(self.function, self._make_id)

    def _scan(self, text: str, final: bool) -> tuple[list[str | FunctionCall], int]:
        if not final:
            return [], 0
        calls = self._calls(strict_json(text))
        return (calls or [text]), len(text)

    def _calls(self, value: Any) -> list[FunctionCall] | None:
        if self.function is not None:
            if not isinstance(value, dict):
                return None
            return [FunctionCall(self.function, dump_arguments(value))]
        if not isinstance(value, list) or not value:
            return None
        calls = [function_call_of(item, ("parameters",)) for item in value]
        return calls if all(calls) else None
