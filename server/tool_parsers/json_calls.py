"""Strict JSON for tool calls: a `{"name": ..., <arguments key>: {...}}` object to a
`FunctionCall`, and arguments to the JSON object text a response carries.

Strict means what an OpenAI client can load back: no NaN or Infinity (nor numbers that overflow
to them); arguments are re-serialized with `json.dumps` (", " and ": " separators, non-ASCII
kept as is, lone surrogates escaped so the text still encodes as UTF-8).
"""

from __future__ import annotations

import json
import math
from typing import Any

from server.tool_parsers.base import FunctionCall


def strict_json(text: str) -> Any:
    """The value `text` (whitespace around allowed) spells as strict JSON, or None when it
    is not strict JSON (nor the JSON `null`, which no caller wants)."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return None


def function_call(text: str, argument_keys: tuple[str, ...]) -> FunctionCall | None:
    """The call that `text` (one JSON object, whitespace around allowed) spells, or None when it
    is not one: `name` must be a non-empty string and exactly one of `argument_keys` must hold
    an object. Other keys are ignored."""
    return function_call_of(strict_json(text), argument_keys)


def function_call_of(obj: Any, argument_keys: tuple[str, ...]) -> FunctionCall | None:
    """`function_call` of an already loaded JSON value."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    present = [key for key in argument_keys if key in obj]
    if not isinstance(name, str) or not name or len(present) != 1:
        return None
    arguments = obj[present[0]]
    if not isinstance(arguments, dict):
        return None
    return FunctionCall(name, dump_arguments(arguments))


def dump_arguments(arguments: dict[str, Any]) -> str:
    """`arguments` (JSON-safe values only) as JSON object text."""
    text = json.dumps(arguments, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escape everything rather than fail later
        return json.dumps(arguments)
    return text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a float")
    return value
