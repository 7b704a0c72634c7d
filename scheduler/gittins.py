"""The Gittins index of a program's attained service, learnt from finished programs.

For a job whose size S is unknown but drawn from a known distribution, the Gittins index of
its attained service a is

    G(a) = sup over D > 0 of  E[W * 1{S - a <= D} | S > a] / E[min(S - a, D) | S > a]

(the best ratio of completion reward to service spent, over every further budget D), and
serving the highest index first minimises the mean weighted response time in an M/G/1 queue
(Gittins; Aalto, Ayesta and Righter 2009; Scully et al. 2021). With reward W = 1 it targets
the mean response time; here W = 1 / (tokens the program generated), so it targets the mean
*normalised* latency, the paper's metric. On an empirical distribution the supremum is taken
at a sample's size, so each index is one pass over the samples above a (see
`gittins_index` for how the samples are read as a distribution).

- A decreasing hazard (heavy tails: most programs short, a few very long) makes G fall with
  a: the least-served go first (LAS, like PLAS and ATLAS).
- Alike sizes (an increasing hazard) make G rise with a: the most-served go first, which
  finishes programs one after another (program FCFS).

`IndexTable` is G on a grid of attained-service points, binned into the scheduler's levels
by equal shares of the log range of every table in use (highest index at level 0; one range
for all classes, so their levels compare), so a lookup is one bisect.
`SizeLearner` keeps the last `window` samples overall and per class (`ClassWindows`) and
rebuilds a table only when an eighth of its samples are new, never per step.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np

from scheduler.class_windows import ClassWindows

GRID_POINTS = 32  # quantile points and as many evenly spaced points per table


def gittins_index(sizes: np.ndarray, weights: np.ndarray, attained: float) -> float | None:
    """G(attained) for the distribution of `sizes` (ascending, positive) with their
    `weights`, read as the empirical CDF interpolated linearly: the smallest size is an
    atom and each other sample's mass is spread evenly over the gap down to the size below
    it (equal sizes stay atoms). On the raw samples G would spike just below every observed
    size (a program there finishes at once with positive probability), so neighbouring
    service values would land levels apart. The supremum is taken at the sizes (the ends of
    the gaps). None when no size exceeds `attained` (nothing is known past it)."""
    first = int(np.searchsorted(sizes, attained, side="right"))
    if first == sizes.size:
        return None
    hi = sizes[first:]
    below = np.concatenate([[hi[0]], hi[:-1]]) if first == 0 else sizes[first - 1:-1]
    lo = np.maximum(below, attained)
    gap = hi - below
    share = np.divide(hi - lo, gap, out=np.ones_like(gap), where=gap > 0)  # above attained
    reward = np.cumsum(weights[first:] * share)
    mass_after = share.sum() - np.cumsum(share)  # mass still running past each size
    spent = np.cumsum(share * ((lo + hi) / 2 - attained)) + mass_after * (hi - attained)
    return float(np.max(reward / spent))


@dataclass(frozen=True)
class IndexTable:
    """log G on a grid: `log_index[i]` holds for `points[i] <= a < points[i+1]`
    (`points[0]` is 0), the last one also past `limit`, the largest size seen: a program
    longer than every one observed keeps the trend of the largest ones (in time mode sizes
    grow with the load, so a run that gets busier meets many such programs)."""

    points: tuple[float, ...]
    log_index: tuple[float, ...]
    limit: float
    # (num_levels, span) -> the level of each grid point: one entry, see `grid_levels`
    _memo: list = field(default_factory=lambda: [None, ()], init=False, repr=False,
                        compare=False)

    @classmethod
    def build(cls, sizes: np.ndarray, weights: np.ndarray) -> IndexTable:
        """The table of positive `sizes` (any order) and their `weights`."""
        order = np.argsort(sizes, kind="stable")
        sizes, weights = sizes[order], weights[order]
        limit = float(sizes[-1])
        grid = np.concatenate([np.quantile(sizes, np.linspace(0, 1, GRID_POINTS)),
                               np.linspace(0, limit, GRID_POINTS, endpoint=False)])
        points = sorted({0.0, *(float(p) for p in grid if p < limit)})
        logs = tuple(float(np.log(gittins_index(sizes, weights, p))) for p in points)
        return cls(tuple(points), logs, limit)

    @property
    def span(self) -> tuple[float, float]:
        """The lowest and highest log G of the table."""
        return min(self.log_index), max(self.log_index)

    def level(self, attained: float, num_levels: int,
              span: tuple[float, float] | None = None) -> int:
        """The level of `attained` service among `num_levels`: equal shares of the log range
        `span` (low, high) of the index (default: this table's own), the highest index at
        level 0. Tables of several classes share one span, so their levels compare."""
        return self.grid_levels(num_levels, span)[bisect.bisect_right(self.points, attained)
                                                  - 1]

    def grid_levels(self, num_levels: int,
                    span: tuple[float, float] | None = None) -> tuple[int, ...]:
        """The level (see `level`) of each grid point's `log_index`. Memoized for the last
        (num_levels, span) asked: the key holds every input besides the table, which never
        changes, so the memo is never stale; a new key replaces it (one entry at most)."""
        key, levels = self._memo
        if key != (num_levels, span):
            low, high = span or self.span
            levels = tuple(_level_of(value, num_levels, low, high) for value in self.log_index)
            self._memo[:] = [(num_levels, span), levels]
        return levels


def _level_of(value: float, num_levels: int, low: float, high: float) -> int:
    """The level of log index `value` among `num_levels` equal shares of [low, high], the
    highest at level 0."""
    rank = (high - value) / (high - low) if high > low else 0.0
    return min(num_levels - 1, max(0, int(rank * num_levels)))


class SizeLearner:
    """Program sizes and weights seen so far, overall and per class (see ClassWindows:
    the last `window` per class, at most `max_classes` classes). A class's table is used once
    it has `min_samples` samples; until then the overall one; until that, none."""

    def __init__(self, window: int = 1000, min_samples: int = 16,
                 max_classes: int = 1024) -> None:
        self._windows: ClassWindows[IndexTable] = ClassWindows(
            lambda samples: IndexTable.build(samples[:, 0], samples[:, 1]), window,
            min_samples, max_classes)
        self._span = (0.0, 0.0)  # log G range over every table in use

    def observe(self, key: Hashable, size: float, weight: float) -> None:
        """Record one finished program of class `key` (its size must be positive)."""
        if self._windows.observe(key, (size, weight)):
            spans = [table.span for table in self._windows.summaries()]
            self._span = (min(low for low, _ in spans), max(high for _, high in spans))

    def table(self, key: Hashable) -> IndexTable | None:
        return self._windows.summary(key)

    def level(self, key: Hashable, attained: float, num_levels: int) -> int | None:
        """The level of a program of class `key` with `attained` service, on the log range
        of every table in use (so a class whose programs are short ranks above one whose
        programs are long); None before any table exists."""
        table = self._windows.summary(key)  # self.table(key), once per charged call
        return None if table is None else table.level(attained, num_levels, self._span)

    def num_samples(self, key: Hashable | None = None) -> int:
        """Samples held for class `key` (overall when None)."""
        return self._windows.num_samples(key)
