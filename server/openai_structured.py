"""OpenAI's ways of asking for structured output, as the engine's `StructuredOutput`:
`response_format` on chat (`{"type": "json_schema", "json_schema": {"schema": ...}}`) and the
Responses API's `text.format` (the same, flat: `{"type": "json_schema", "schema": ...}`), and
a forced `tool_choice` ("required" or a named function: `server.tool_parsers.forced`)."""

from __future__ import annotations

import json
from typing import Any

from engine.structured.spec import StructuredOutput

FORMAT_TYPES = ("text", "json_object", "json_schema")


def format_output(fmt: dict[str, Any] | None, field: str,
                  nested: bool = True) -> StructuredOutput | None:
    """The grammar `fmt` asks for (None: free text). `nested`: the schema is under
    `json_schema.schema` (chat's `response_format`), else under `schema` (`text.format`).
    ValueError naming the field (`field`.type, `field`...schema) when it is malformed.
    `strict` is accepted either way: the output always matches the schema."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in FORMAT_TYPES:
        raise ValueError(f"{field}.type: must be one of {', '.join(FORMAT_TYPES)}, got "
                         f"{kind!r}")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput()
    holder, where = (fmt.get("json_schema"), f"{field}.json_schema") if nested else (fmt, field)
    schema = holder.get("schema") if isinstance(holder, dict) else None
    if not isinstance(schema, dict):
        raise ValueError(f"{where}.schema: a JSON Schema object is required")
    try:
        return StructuredOutput(json.dumps(schema))
    except ValueError as exc:
        raise ValueError(f"{where}.schema: {exc}") from None


def forced_function(tool_choice: Any, tools: list | None) -> tuple[bool, str | None]:
    """(forced, function) of a `tool_choice`: "none", "auto" or absent -> (False, None),
    "required" -> (True, None), `{"type": "function", "function": {"name": N}}` (or the
    Responses API's flat `{"type": "function", "name": N}`) -> (True, N). ValueError naming
    `tool_choice` for any other value, or a forced choice without tools."""
    if tool_choice in (None, "none", "auto"):
        return False, None
    if tool_choice == "required":
        function = None
    elif isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        inner = tool_choice.get("function")
        function = (inner if isinstance(inner, dict) else tool_choice).get("name")
        if not isinstance(function, str):
            raise ValueError("tool_choice: a function choice needs the function's name")
    else:
        raise ValueError('tool_choice: must be "none", "auto", "required" or '
                         '{"type": "function", "function": {"name": ...}}')
    if not tools:
        raise ValueError("tool_choice: a forced call needs tools")
    return True, function
