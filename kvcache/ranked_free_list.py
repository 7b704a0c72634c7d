"""Free blocks that still hold cached content, evicted by rank, least recently freed first.

A rank is an opaque number set by whoever frees a block (the scheduler: its owner's
priority); the list never interprets it beyond ordering. Eviction takes the lowest rank first
and, inside a rank, the block that entered that rank first (LRU).

Blocks sit in runs: a run is blocks of one owner that entered one rank one after another
(a freed table, a retained program's KV), oldest first, and a rank is its runs in the order
they entered it. So re-ranking an owner whose blocks form one run moves that run whole, in
O(log R) (R: the distinct ranks present, a handful), however long its program's context;
several runs are merged in the order their blocks were added (C-level sort). Adding and
removing a block are O(1) plus O(log R) when a rank appears or empties; nothing scans all
blocks.
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence

from kvcache.errors import KVCacheIntegrityError


class _Run:
    """Blocks of one owner (None: ownerless) at one rank, in the order they entered it."""

    __slots__ = ("rank", "owner", "blocks")

    def __init__(self, rank: float, owner: Hashable, blocks: OrderedDict[int, None]) -> None:
        self.rank = rank
        self.owner = owner
        self.blocks = blocks


class RankedFreeList:
    """Blocks keyed by id, each with a rank and an owner (any hashable, or None). A set of
    owners may be marked counted: `num_counted` is the number of their blocks here, kept
    up to date as blocks come and go."""

    def __init__(self) -> None:
        self._runs_at: dict[float, OrderedDict[_Run, None]] = {}  # oldest run first
        self._size_at: dict[float, int] = {}  # blocks per rank
        self._ranks: list[float] = []  # sorted ranks with a run
        self._run_of: dict[int, _Run] = {}
        self._runs_of: dict[Hashable, set[_Run]] = {}  # owner (not None) -> its runs
        self._count_of: dict[Hashable, int] = {}  # owner (not None) -> its blocks here
        self._seq_of: dict[int, int] = {}  # when each block was added: LRU across re-ranks
        self._seq = itertools.count()
        self._counted: set[Hashable] = set()
        self._num_counted = 0

    def __len__(self) -> int:
        return len(self._run_of)

    def __contains__(self, block: int) -> bool:
        return block in self._run_of

    def __iter__(self) -> Iterator[int]:
        return iter(self._run_of)

    def rank_of(self, block: int) -> float:
        return self._run_of[block].rank

    def owner_of(self, block: int) -> Hashable:
        run = self._run_of.get(block)
        return run.owner if run is not None else None

    def add(self, block: int, rank: float, owner: Hashable = None) -> None:
        """Add `block` as the most recent of `rank`; ValueError if it is already here."""
        if block in self._run_of:
            raise ValueError(f"block {block} is already on the free list")
        self._seq_of[block] = next(self._seq)
        run = self._tail_run(rank, owner)
        run.blocks[block] = None
        self._run_of[block] = run
        self._added(run, 1)

    def add_many(self, blocks: Sequence[int], rank: float, owner: Hashable = None) -> None:
        """`add` each of `blocks` in order (the last listed is the most recent), in bulk;
        ValueError, changing nothing, if one is already here or listed twice."""
        if not self._run_of.keys().isdisjoint(blocks):
            dup = next(b for b in blocks if b in self._run_of)
            raise ValueError(f"block {dup} is already on the free list")
        if len(set(blocks)) != len(blocks):
            raise ValueError(f"blocks: one is listed twice in {list(blocks)!r}")
        if not blocks:
            return
        self._seq_of.update(zip(blocks, self._seq))
        run = self._tail_run(rank, owner)
        run.blocks.update(dict.fromkeys(blocks))
        self._run_of.update(dict.fromkeys(blocks, run))
        self._added(run, len(blocks))

    def remove(self, block: int) -> None:
        """Take `block` off the list (revived or evicted); KeyError if it is not here."""
        run = self._run_of.pop(block)
        del self._seq_of[block], run.blocks[block]
        self._taken(run, 1)

    def remove_many(self, blocks: Sequence[int]) -> None:
        """`remove` each of `blocks`, in bulk; KeyError, changing nothing, if one is not here
        or listed twice."""
        listed = set(blocks)
        if not self._run_of.keys() >= listed or len(listed) != len(blocks):
            raise KeyError(next((b for b in blocks if b not in self._run_of), "listed twice"))
        run_of, seq_of, taken = self._run_of, self._seq_of, {}
        for block in blocks:
            run = run_of.pop(block)
            del seq_of[block], run.blocks[block]
            taken[run] = taken.get(run, 0) + 1
        for run, n in taken.items():
            self._taken(run, n)

    def count_of(self, owner: Hashable) -> int:
        """Blocks of `owner` on the list."""
        return self._count_of.get(owner, 0)

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
        moving = [run for run in self._runs_of.get(owner, ()) if run.rank != rank]
        for run in moving:
            self._detach(run)
        if len(moving) == 1:
            run = moving[0]
        elif moving:
            for old in moving:
                self._forget_run(old)
            blocks = sorted(itertools.chain.from_iterable(r.blocks for r in moving),
                            key=self._seq_of.__getitem__)
            run = _Run(rank, owner, OrderedDict.fromkeys(blocks))
            self._run_of.update(dict.fromkeys(blocks, run))
            self._runs_of.setdefault(owner, set()).add(run)
        else:
            return 0
        run.rank = rank
        self._attach(run)
        return len(run.blocks)

    def count_at_most(self, max_rank: float) -> int:
        """Blocks whose rank is <= `max_rank`."""
        end = bisect.bisect_right(self._ranks, max_rank)
        return sum(self._size_at[r] for r in self._ranks[:end])

    def lowest(self) -> tuple[int, float] | None:
        """The next block to evict and its rank, or None when empty. Changes nothing."""
        if not self._ranks:
            return None
        rank = self._ranks[0]
        return next(iter(next(iter(self._runs_at[rank])).blocks)), rank

    def check_integrity(self) -> None:
        """Raise KVCacheIntegrityError unless the runs, ranks and counts agree: every block
        in exactly the run that `rank_of` and `owner_of` read, no run empty, the ranks
        sorted and each rank's size the sum of its runs', the owners' counts and
        `num_counted` the blocks' own."""
        ranks, owners = {}, {}
        for rank, runs in self._runs_at.items():
            for run in runs:
                if run.rank != rank or not run.blocks or any(
                        self._run_of.get(b) is not run for b in run.blocks):
                    raise KVCacheIntegrityError(f"free list: a run at rank {rank} is empty or "
                                                f"disowns its blocks")
                ranks[rank] = ranks.get(rank, 0) + len(run.blocks)
                if run.owner is not None:
                    owners[run.owner] = owners.get(run.owner, 0) + len(run.blocks)
                    if run not in self._runs_of.get(run.owner, ()):
                        raise KVCacheIntegrityError(f"free list: a run of {run.owner!r} is "
                                                    f"not listed as its")
        if (sorted(ranks) != self._ranks or ranks != self._size_at or owners != self._count_of
                or not sum(ranks.values()) == len(self._run_of) == len(self._seq_of)
                or sum(owners.get(o, 0) for o in self._counted) != self._num_counted
                or sum(map(len, self._runs_of.values())) != sum(
                    run.owner is not None for runs in self._runs_at.values() for run in runs)):
            raise KVCacheIntegrityError("free list: rank sizes, owner counts or the counted "
                                        "total disagree with its runs")

    def _tail_run(self, rank: float, owner: Hashable) -> _Run:
        """The run that blocks of `owner` added now at `rank` join: the rank's last run if it
        is the owner's, else a new one put last."""
        runs = self._runs_at.get(rank)
        run = next(reversed(runs)) if runs else None
        if run is None or run.owner != owner:
            run = _Run(rank, owner, OrderedDict())
            self._attach(run)
            if owner is not None:
                self._runs_of.setdefault(owner, set()).add(run)
        return run

    def _added(self, run: _Run, n: int) -> None:
        """Count `n` blocks just added to `run`."""
        self._size_at[run.rank] += n
        owner = run.owner
        if owner is not None:
            self._count_of[owner] = self._count_of.get(owner, 0) + n
            if owner in self._counted:
                self._num_counted += n

    def _taken(self, run: _Run, n: int) -> None:
        """Count `n` blocks just taken out of `run`; drop the run if that emptied it."""
        self._size_at[run.rank] -= n
        owner = run.owner
        if not run.blocks:
            self._detach(run)
            if owner is not None:
                self._forget_run(run)
        if owner is not None:
            left = self._count_of[owner] - n
            if left:
                self._count_of[owner] = left
            else:
                del self._count_of[owner]
            if owner in self._counted:
                self._num_counted -= n

    def _attach(self, run: _Run) -> None:
        """Put `run` (and its blocks) last at its rank."""
        runs = self._runs_at.get(run.rank)
        if runs is None:
            runs = self._runs_at[run.rank] = OrderedDict()
            self._size_at[run.rank] = 0
            bisect.insort(self._ranks, run.rank)
        runs[run] = None
        self._size_at[run.rank] += len(run.blocks)

    def _detach(self, run: _Run) -> None:
        """Take `run` (and its blocks) off its rank."""
        runs = self._runs_at[run.rank]
        del runs[run]
        self._size_at[run.rank] -= len(run.blocks)
        if not runs:
            del self._runs_at[run.rank], self._size_at[run.rank]
            del self._ranks[bisect.bisect_left(self._ranks, run.rank)]

    def _forget_run(self, run: _Run) -> None:
        owned = self._runs_of[run.owner]
        owned.discard(run)
        if not owned:
            del self._runs_of[run.owner]
