"""Free blocks that still hold cached content, evicted by rank, least recently freed first.

A rank is an opaque number set by whoever frees a block (the scheduler: its owner's
priority); the list never interprets it beyond ordering. Eviction takes the lowest rank first
and, inside a rank, the block that entered that rank first (LRU). Every operation is O(log R)
plus the blocks it touches, where R is the number of distinct ranks present (a handful: the
scheduler uses one rank per queue level and state), so nothing scans all blocks.
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterator


class RankedFreeList:
    """Blocks keyed by id, each with a rank and an owner (any hashable, or None). A set of
    owners may be marked counted: `num_counted` is the number of their blocks here, kept
    up to date as blocks come and go."""

    def __init__(self) -> None:
        self._buckets: dict[float, OrderedDict[int, None]] = {}
        self._ranks: list[float] = []  # sorted ranks with a non-empty bucket
        self._rank_of: dict[int, float] = {}
        self._owner_of: dict[int, Hashable] = {}
        self._blocks_of: dict[Hashable, set[int]] = {}
        self._seq_of: dict[int, int] = {}  # when each block was added: LRU across re-ranks
        self._seq = itertools.count()
        self._counted: set[Hashable] = set()
        self._num_counted = 0

    def __len__(self) -> int:
        return len(self._rank_of)

    def __contains__(self, block: int) -> bool:
        return block in self._rank_of

    def __iter__(self) -> Iterator[int]:
        return iter(self._rank_of)

    def rank_of(self, block: int) -> float:
        return self._rank_of[block]

    def owner_of(self, block: int) -> Hashable:
        return self._owner_of.get(block)

    def add(self, block: int, rank: float, owner: Hashable = None) -> None:
        """Add `block` as the most recent of `rank`; ValueError if it is already here."""
        if block in self._rank_of:
            raise ValueError(f"block {block} is already on the free list")
        self._seq_of[block] = next(self._seq)
        self._put(block, rank)
        if owner is not None:
            self._owner_of[block] = owner
            self._blocks_of.setdefault(owner, set()).add(block)
            self._num_counted += owner in self._counted

    def remove(self, block: int) -> None:
        """Take `block` off the list (revived or evicted); KeyError if it is not here."""
        rank = self._rank_of.pop(block)
        del self._seq_of[block]
        self._drop_from_bucket(block, rank)
        owner = self._owner_of.pop(block, None)
        if owner is not None:
            owned = self._blocks_of[owner]
            owned.discard(block)
            if not owned:
                del self._blocks_of[owner]
            self._num_counted -= owner in self._counted

    def count_of(self, owner: Hashable) -> int:
        """Blocks of `owner` on the list."""
        return len(self._blocks_of.get(owner, ()))

    @property
    def num_counted(self) -> int:
        """Blocks on the list whose owner is marked counted."""
        return self._num_counted

    def set_counted(self, owner: Hashable, counted: bool) -> None:
        """Mark `owner` counted (its blocks here, now and later, are in `num_counted`) or
        not; marking it as it already is changes nothing."""
        if counted == (owner in self._counted):
            return
        if counted:
            self._counted.add(owner)
            self._num_counted += self.count_of(owner)
        else:
            self._counted.remove(owner)
            self._num_counted -= self.count_of(owner)

    def set_rank(self, owner: Hashable, rank: float) -> int:
        """Move every block of `owner` to `rank`; they become the most recent there, keeping
        their relative LRU order (a freed table's tail still goes first). Returns how many
        moved; blocks already at `rank` stay put."""
        moving = [b for b in self._blocks_of.get(owner, ()) if self._rank_of[b] != rank]
        for block in sorted(moving, key=self._seq_of.__getitem__):
            self._drop_from_bucket(block, self._rank_of[block])
            self._put(block, rank)
        return len(moving)

    def count_at_most(self, max_rank: float) -> int:
        """Blocks whose rank is <= `max_rank`."""
        end = bisect.bisect_right(self._ranks, max_rank)
        return sum(len(self._buckets[r]) for r in self._ranks[:end])

    def lowest(self) -> tuple[int, float] | None:
        """The next block to evict and its rank, or None when empty. Changes nothing."""
        if not self._ranks:
            return None
        rank = self._ranks[0]
        return next(iter(self._buckets[rank])), rank

    def _put(self, block: int, rank: float) -> None:
        bucket = self._buckets.get(rank)
        if bucket is None:
            bucket = self._buckets[rank] = OrderedDict()
            bisect.insort(self._ranks, rank)
        bucket[block] = None
        self._rank_of[block] = rank

    def _drop_from_bucket(self, block: int, rank: float) -> None:
        bucket = self._buckets[rank]
        del bucket[block]
        if not bucket:
            del self._buckets[rank]
            del self._ranks[bisect.bisect_left(self._ranks, rank)]
