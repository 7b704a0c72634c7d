"""Repeats of a two-sided comparison: which side goes first, and the spread of the ratios.

Alternating the side that runs first means a machine that speeds up or slows down during the
run moves both sides alike over the repeats.
"""

from __future__ import annotations

import statistics
from typing import Sequence, TypeVar

T = TypeVar("T")


def alternate(repeat: int, first: Sequence[T], second: Sequence[T]) -> list[T]:
    """`first` then `second` in even repeats, `second` then `first` in odd ones."""
    return [*first, *second] if repeat % 2 == 0 else [*second, *first]


def spread_text(ratios: Sequence[float]) -> str:
    """"2.65x, 2.45x: min 2.45x / median 2.55x / max 2.65x" for a repeat's ratios."""
    if not ratios:
        raise ValueError("ratios: must not be empty")
    listed = ", ".join(f"{r:.2f}x" for r in ratios)
    return (f"{listed}: min {min(ratios):.2f}x / median {statistics.median(ratios):.2f}x / "
            f"max {max(ratios):.2f}x")
