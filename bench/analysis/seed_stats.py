"""Confidence intervals over seeds, for figures measured once per seed.

- `interval(values)`: the mean of the per-seed values and its two-sided 95% Student-t
  interval, mean +- t(0.975, n - 1) x sd / sqrt(n) (sd with n - 1 degrees of freedom).
  With 3 seeds t is 4.303: an interval is wide unless the seeds agree closely.
- `paired_ratio(ours, theirs)`: two policies run on the same seeds' traces (common random
  numbers): the interval of the mean of the per-seed ratios ours / theirs. Pairing removes
  what the seeds' traces have in common, so it is tighter than comparing two intervals.
- `verdict(ratio)`: "loses" when the whole interval is above 1 (ours is larger: latencies,
  worse), "wins" when it is below 1, else "tie" (inside the interval).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

# t(0.975, df) for df = 1..30; past 30 the normal quantile 1.96 is within 2%.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"df: must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Interval:
    """A mean over `n` seeds with its 95% interval [low, high] (low = high = mean for one
    seed: no interval can be given, `n` says so)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 4) -> str:
        """"0.0312 [0.0301, 0.0323]" (the mean alone for one seed, with "(1 seed)")."""
        if self.n < 2:
            return f"{self.mean:.{digits}g} (1 seed)"
        return f"{self.mean:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


def interval(values: Sequence[float]) -> Interval:
    """The mean of `values` (one per seed, all finite) and its 95% Student-t interval."""
    if not values:
        raise ValueError("values: must not be empty")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"values: must be finite, got {list(values)}")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, mean, mean, len(values))
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> Interval:
    """The interval of the mean per-seed ratio ours[i] / theirs[i] (same seeds, same
    order; every `theirs` positive)."""
    if len(ours) != len(theirs):
        raise ValueError(f"ours and theirs: {len(ours)} and {len(theirs)} values, must match")
    if not all(t > 0 for t in theirs):
        raise ValueError(f"theirs: must be positive, got {list(theirs)}")
    return interval([o / t for o, t in zip(ours, theirs)])


def verdict(ratio: Interval) -> str:
    """"loses" / "wins" / "tie" for an interval of ours / theirs (lower is better); "n/a"
    for one seed (no interval)."""
    if ratio.n < 2:
        return "n/a"
    if ratio.low > 1:
        return "loses"
    if ratio.high < 1:
        return "wins"
    return "tie"
