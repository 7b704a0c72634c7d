"""A forced tool call (`tool_choice` "required" or a named function), as vLLM does it: the
output grammar is JSON the server turns into calls, whatever the model's own tool format, so
even a weak model emits calls whose arguments match their schemas.

- A named function: the output is its arguments, one JSON object of its `parameters` schema.
- "required": the output is a JSON array of `{"name": ..., "parameters": {...}}` objects,
  each naming an offered tool with arguments of its schema; at least one, and exactly one
  when `parallel_tool_calls` is false.

`ForcedCallParser` streams the calls as they are written; an output the token limit cut is
a call with the arguments written so far (vLLM streams such partial arguments too), never
content.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Any

from engine.structured.spec import StructuredOutput
from server.tool_parsers.base import FunctionCall, PartialCall, Piece, ToolParser, new_call_id
from server.tool_parsers.call_object import CallObject
from server.tool_parsers.canonical_json import CanonicalJson, skip_space

ANY_ARGUMENTS: dict[str, Any] = {"type": "object"}
ARGUMENT_KEYS = ("parameters",)


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
    """Reads the output of `forced_output(..., function, ...)` back as calls, streaming them
    as the model writes them (unlike the registry's parsers, it takes the forced `function`;
    None: "required"). The output is all calls, never content:

    - a named function: one call, open from the start; its arguments are the output read by
      `CanonicalJson` (an object), what follows the object dropped;
    - "required": each element of the array read by a `CallObject` (arguments key
      `parameters`), opening once its name is known.

    An output cut by the token limit gives the arguments written so far (an element cut
    before its name is known gives nothing); text the grammar would not allow ends the
    calls, and it and all after it are dropped.
    """

    def __init__(self, function: str | None,
                 make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(make_id)
        self.function = function
        self._value = CanonicalJson(want_object=True)  # a named function's arguments
        self._array = _Array.START  # "required": where in the array the output is
        self._call = CallObject(ARGUMENT_KEYS)  # "required": the element being read

    def _fresh(self) -> ForcedCallParser:
        return ForcedCallParser(self.function, self._make_id)

    def _scan(self, text: str, final: bool) -> tuple[list[Piece], int]:
        if self.function is None:
            return self._scan_array(text, final)
        if self._value.done:
            return [], len(text)
        self._value.feed(text)
        if self._value.done or final:
            return [FunctionCall(self.function, self._value.text + self._value.tail())], len(text)
        return [PartialCall(self.function, self._value.text)], len(text)

    def _scan_array(self, text: str, final: bool) -> tuple[list[Piece], int]:
        pieces: list[Piece] = []
        at = 0
        while self._array is not _Array.OVER:
            if self._array is _Array.ELEMENT:
                at = self._call.feed(text, at, len(text))
                name = self._call.name
                if self._call.done:
                    pieces.append(FunctionCall(name, self._call.final_arguments()))
                    self._array = _Array.AFTER_ELEMENT
                elif self._call.failed or final:
                    if name is not None:
                        pieces.append(FunctionCall(name, self._call.final_arguments()))
                    self._array = _Array.OVER
                else:
                    if name is not None:
                        pieces.append(PartialCall(name, self._call.arguments))
                    return pieces, at
                continue
            at = skip_space(text, at, len(text))
            if at == len(text):
                return pieces, at
            self._array = _after(self._array, text[at])
            if self._array is _Array.ELEMENT:
                self._call = CallObject(ARGUMENT_KEYS)
            else:
                at += 1
        return pieces, len(text)


class _Array(Enum):
    START = "start"  # before the `[`
    FIRST = "first"  # after the `[`: an element or `]`
    NEXT = "next"  # after a `,`: an element
    ELEMENT = "element"  # inside an element
    AFTER_ELEMENT = "after_element"  # `,` or `]`
    OVER = "over"  # the array ended (or the output left the grammar): the rest is dropped


def _after(place: _Array, char: str) -> _Array:
    """Where `char` (not whitespace) leads from `place` (outside an element)."""
    if place is _Array.START:
        return _Array.FIRST if char == "[" else _Array.OVER
    if place is _Array.AFTER_ELEMENT:
        return _Array.NEXT if char == "," else _Array.OVER
    if place in (_Array.FIRST, _Array.NEXT) and char == "{":
        return _Array.ELEMENT
    return _Array.OVER  # the array's `]`, or text the grammar would not allow
