"""The `pythonic` format (Llama 3.2 and Llama 4 pythonic tool calling, ToolACE): an output
that is, apart from surrounding whitespace, one Python list of calls with keyword arguments:

    [get_weather(city="Paris", unit="c"), get_time(zone=None)]

Each element is `name(key=value, ...)` with a plain name, no positional arguments, no
`**`, no repeated keys, and each value a Python literal of JSON's kinds: str, int, finite
float, bool, None, and lists and str-keyed dicts of those (no tuples, sets, bytes or complex).
Arguments are the keyword values as a JSON object. Anything else, an empty list included, is
all content. Streaming holds the whole output back while it could be such a list (from a
leading `[`) and decides at `finish`; an output starting otherwise streams as content at once.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from server.tool_parsers.base import FunctionCall, ToolParser, new_call_id
from server.tool_parsers.json_calls import dump_arguments


class PythonicToolParser(ToolParser):
    """`[f(a=1), g(b="x")]` as the whole output, or else plain content."""

    def __init__(self, make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(make_id)
        self._is_content = False  # decided: the output is plain content

    def _scan(self, text: str, final: bool) -> tuple[list[str | FunctionCall], int]:
        if not self._is_content:
            body = text.strip()
            self._is_content = bool(body) and not body.startswith("[")
        if self._is_content:
            return [text], len(text)
        if not final:
            return [], 0
        calls = _calls(text.strip())
        return (calls if calls is not None else [text]), len(text)


def _calls(source: str) -> list[FunctionCall] | None:
    """The calls `source` lists, or None when it is not a non-empty list of calls."""
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    calls = [_call(node) for node in tree.body.elts]
    return None if None in calls else calls


def _call(node: ast.expr) -> FunctionCall | None:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        return None
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None or keyword.arg in arguments:
            return None
        try:
            value = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
        if not _json_kind(value):
            return None
        arguments[keyword.arg] = value
    return FunctionCall(node.func.id, dump_arguments(arguments))


def _json_kind(value: Any) -> bool:
    """Whether `value` is made only of what JSON can say (and so of what json.dumps writes as
    valid JSON)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_kind(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _json_kind(item) for key, item in value.items())
    return False
