"""Host block ids: the swap space of preempted calls and the second tier of the prefix cache."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Hashable, Sequence

from kvcache.errors import KVCacheIntegrityError
from kvcache.prefix_index import PrefixIndex
from kvcache.ranked_free_list import RankedFreeList


class HostBlockPool:
    """Owns host block ids `0..num_blocks-1`; each is held by exactly one owner, cached, or free.

    Held blocks belong to a swapped call (or to a copy in flight). Cached blocks hold a prefix
    block offloaded from the device (`store`): findable by hash until an allocation needs the
    space, lowest rank first and least recently stored first inside a rank (like the device
    pool), or until `take` claims one for a copy back. Plain free ids are handed out from the
    head of their list first (initially increasing) and freed ones join its tail.
    `num_blocks` may be 0 (no host memory): every non-empty allocation fails.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._used: set[int] = set()
        self._cached = RankedFreeList()
        self._index = PrefixIndex("host block")

    @property
    def num_free(self) -> int:
        """Blocks an allocation can take: plain free and cached."""
        return len(self._free) + len(self._cached)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def allocate(self, n: int) -> list[int] | None:
        """Take `n` host blocks, plain ones first, then evicting cached ones (their content
        is dropped); None and no change when fewer than `n` are free."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n > self.num_free:
            return None
        blocks = []
        for _ in range(n):
            if self._free:
                block = self._free.popleft()
            else:
                block, _ = self._cached.lowest()  # type: ignore[misc]
                self._cached.remove(block)
                self._index.remove(block)
            blocks.append(block)
        self._used.update(blocks)
        return blocks

    def free(self, block_ids: Sequence[int]) -> None:
        """Return held host blocks to the tail of the free list, in the given order.

        Raises KVCacheIntegrityError, changing nothing, for a block that is not held (or is
        listed twice).
        """
        seen: set[int] = set()
        for block in block_ids:
            if block not in self._used or block in seen:
                raise KVCacheIntegrityError(f"host block {block}: freed but not held")
            seen.add(block)
        self._used.difference_update(block_ids)
        self._free.extend(block_ids)

    def store(self, block: int, block_hash: int, token_ids: Sequence[int], rank: float,
              owner: Hashable = None) -> None:
        """A held block now caches the prefix block `block_hash` (its copy is being made this
        step): it becomes cached free with `rank`. A hash already cached here makes the block
        plain free instead (one copy per hash)."""
        if block not in self._used:
            raise KVCacheIntegrityError(f"host block {block}: stored but not held")
        self._used.discard(block)
        if self._index.has_hash(block_hash):
            self._free.append(block)
            return
        self._index.add(block, block_hash, token_ids)
        self._cached.add(block, rank, owner)

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> int | None:
        """The cached host block with this hash and these token ids, else None."""
        return self._index.lookup(block_hash, token_ids)

    def lookup_run(self, hashes: Sequence[int], token_ids: Sequence[int], first: int, end: int,
                   block_size: int) -> list[int]:
        """`lookup` of a chain of full blocks, up to the first miss (`PrefixIndex.lookup_run`)."""
        return self._index.lookup_run(hashes, token_ids, first, end, block_size)

    def is_cached(self, block: int) -> bool:
        """Whether the block holds a findable prefix block."""
        return block in self._cached

    def take(self, block: int) -> None:
        """Claim a cached block for a copy back to the device: it leaves the index and is
        held (free it once the copy has run)."""
        self._cached.remove(block)
        self._index.remove(block)
        self._used.add(block)

    def discard_hash(self, block_hash: int, token_ids: Sequence[int]) -> None:
        """Drop the cached copy of `block_hash`, if any (the device has it again)."""
        block = self._index.lookup(block_hash, token_ids)
        if block is not None:
            self._cached.remove(block)
            self._index.remove(block)
            self._free.append(block)

    def set_rank(self, owner: Hashable, rank: float) -> int:
        """Re-rank the cached blocks stored for `owner`; returns how many moved."""
        return self._cached.set_rank(owner, rank)

    def check_integrity(self, used: Collection[int]) -> None:
        """Raise KVCacheIntegrityError unless the held ids are exactly `used` (each held once),
        the cached ids are exactly the indexed ones, and the free list holds every other id
        exactly once."""
        owners = Counter(used)
        shared = [b for b, count in owners.items() if count > 1]
        if shared:
            raise KVCacheIntegrityError(f"host block {min(shared)}: held by more than one owner")
        if self._used != owners.keys():
            stray = min(self._used.symmetric_difference(owners))
            raise KVCacheIntegrityError(f"host block {stray}: held set disagrees with owners")
        cached = set(self._cached)
        if cached != self._index.blocks() or cached & self._used:
            stray = min(cached.symmetric_difference(self._index.blocks()) or cached & self._used)
            raise KVCacheIntegrityError(f"host block {stray}: cached set disagrees with index")
        self._index.check_integrity()
        self._cached.check_integrity()
        free = Counter(self._free)
        bad = [b for b, count in free.items() if count > 1]
        rest = set(range(self.num_blocks)) - self._used - cached
        bad += rest.symmetric_difference(free)
        if bad:
            raise KVCacheIntegrityError(f"host block {min(bad)}: wrong on the free list")
