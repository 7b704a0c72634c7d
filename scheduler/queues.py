"""Discretized priority queues: K levels over priority values, and the per-level FIFO order.

Level i covers values in [B(i-1), B(i)) with B(-1) = 0 and quanta growing geometrically:
quantum(i) = quantum_base * quantum_growth**i, B(i) = quantum(0) + ... + quantum(i). The last
level is unbounded. Smaller level = higher priority.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from operator import itemgetter
from collections.abc import Container, Hashable, Iterator, KeysView

_item = itemgetter(1)  # the item of a level's (order, item) entry


@dataclass(frozen=True)
class QueueLevels:
    num_queues: int
    quantum_base: float
    quantum_growth: float

    def __post_init__(self) -> None:
        if self.num_queues < 1:
            raise ValueError(f"num_queues must be >= 1, got {self.num_queues}")
        if self.quantum_base <= 0:
            raise ValueError(f"quantum_base must be positive, got {self.quantum_base}")
        if self.quantum_growth <= 1:
            raise ValueError(f"quantum_growth must be > 1, got {self.quantum_growth}")

    def quantum(self, level: int) -> float:
        if level == self.num_queues - 1:
            return float("inf")
        return self.quantum_base * self.quantum_growth ** level

    def upper_bound(self, level: int) -> float:
        """B(level): the first value past `level`."""
        if level >= self.num_queues - 1:
            return float("inf")
        g = self.quantum_growth
        return self.quantum_base * (g ** (level + 1) - 1) / (g - 1)

    def level_of(self, value: float) -> int:
        """The level whose range holds `value`."""
        for level in range(self.num_queues - 1):
            if value < self.upper_bound(level):
                return level
        return self.num_queues - 1

    def quantum_left_at(self, value: float) -> float:
        """What a call entering at `value` may use before demotion: its level's full quantum."""
        return self.quantum(self.level_of(value))


class LevelQueues:
    """Items kept per level in ascending `order` key (FCFS within a level). Insertion and
    removal are a bisect on one level's list; iteration visits levels top-down in order."""

    def __init__(self, num_levels: int) -> None:
        self._levels: list[list[tuple[tuple, Hashable]]] = [[] for _ in range(num_levels)]
        self._where: dict[Hashable, tuple[int, tuple]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item: Hashable) -> bool:
        return item in self._where

    def add(self, item: Hashable, level: int, order: tuple) -> None:
        if item in self._where:
            raise ValueError(f"{item!r} is already queued")
        bisect.insort(self._levels[level], (order, item))
        self._where[item] = (level, order)

    def remove(self, item: Hashable) -> None:
        level, order = self._where.pop(item)
        entries = self._levels[level]
        if entries[0][1] == item:  # the common cases (an admission, a victim): no search
            del entries[0]
        elif entries[-1][1] == item:
            del entries[-1]
        else:
            del entries[bisect.bisect_left(entries, (order, item))]

    def members(self) -> KeysView[Hashable]:
        """Every queued item, in no particular order (a live view: no copy)."""
        return self._where.keys()

    def __iter__(self) -> Iterator[Hashable]:
        """Top-down, FCFS within a level; safe against removal of visited items."""
        for entries in self._levels:
            for _, item in list(entries):
                if item in self._where:
                    yield item

    def depths(self) -> tuple[int, ...]:
        """The number of items at each level, top-down."""
        return tuple(len(entries) for entries in self._levels)

    def item_at(self, level: int, index: int) -> Hashable | None:
        """The `index`-th item of a level in order, or None past its end (no copy)."""
        entries = self._levels[level]
        return entries[index][1] if index < len(entries) else None

    def snapshot(self, level: int) -> list[Hashable]:
        """The items of one level in order, as a list that later changes do not affect
        (the caller skips items removed meanwhile)."""
        return list(map(_item, self._levels[level]))

    def lowest(self, below: int | None = None, skip: Container[Hashable] = ()) -> Hashable | None:
        """The lowest-priority item not in `skip`: the last of the lowest non-empty level,
        only among levels strictly below `below` when it is given."""
        for level in range(len(self._levels) - 1, -1, -1):
            if below is not None and level <= below:
                return None
            for _, item in reversed(self._levels[level]):
                if item not in skip:
                    return item
        return None
