"""Argument types shared by `agentix serve` and `agentix bench`: `--set FIELD=VALUE` for the
fields of a config (`EngineConfig.flat_field_types()`), and positive numbers. Torch-free: the
fields are passed in, not imported."""

from __future__ import annotations

import argparse
import ast
import types
import typing
from typing import Any, Iterable, Mapping


def positive_float(text: str) -> float:
    """argparse type: a float > 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def parse_cutoff(text: str) -> int | str:
    """argparse type of `--cutoff`: a prompt-token count >= 0, or "auto"."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a token count >= 0 or 'auto', got {text!r}")
    return value


def parse_placement_option(text: str) -> tuple[str, int | float | str]:
    """argparse type of `--placement-option`: NAME=VALUE (`scheduler.placement.parse_option`)."""
    from scheduler.placement import parse_option

    try:
        return parse_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_override(text: str) -> tuple[str, Any]:
    """argparse type of `--set`: `FIELD=VALUE` as (field, value); VALUE is read as a Python
    literal (numbers, True/False/None), else kept as a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        return name.strip(), value.strip()


def typed_overrides(hints: Mapping[str, Any], pairs: list[tuple[str, Any]],
                    owner: str) -> dict[str, Any]:
    """`pairs` as keyword arguments of the config `owner` whose fields `hints` maps to their
    resolved annotations, each value checked against its field's annotation (an int is a
    valid float; a bool is no int); ValueError naming the field and what it expects
    otherwise. A later pair for the same field wins."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name not in hints:
            raise ValueError(f"{name}: not a field of {owner} (fields: {', '.join(hints)})")
        kinds = _plain_types(hints[name])
        if not any(_fits(value, kind) for kind in kinds):
            expected = " or ".join(kind.__name__ for kind in kinds)
            raise ValueError(f"{name}={value!r}: expected {expected}")
        out[name] = float(value) if float in kinds and type(value) is int else value
    return out


def _plain_types(hint: Any) -> tuple[type, ...]:
    """The plain classes of a (union) annotation: `int | None` -> (int, NoneType); generic
    arms such as `type[Policy]` cannot come from a command line and are left out."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    arms = typing.get_args(hint) if union else (hint,)
    return tuple(arm for arm in arms if typing.get_origin(arm) is None and isinstance(arm, type))


def _fits(value: Any, kind: type) -> bool:
    if kind is float:
        return type(value) in (int, float)
    return type(value) is kind


def name_list(text: str, allowed: Iterable[str], what: str) -> list[str]:
    """A comma-separated list of names out of `allowed` (in order, each once);
    ArgumentTypeError naming `what` and the allowed names otherwise."""
    allowed = sorted(allowed)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in allowed for n in names):
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list of {allowed}, "
                                         f"got {text!r}")
    return list(dict.fromkeys(names))

