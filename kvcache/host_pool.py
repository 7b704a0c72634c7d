"""Host (swap) block ids: a plain pool without sharing or caching."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Sequence

from kvcache.errors import KVCacheIntegrityError


class HostBlockPool:
    """Owns host block ids `0..num_blocks-1`; each is either free or held by exactly one owner.

    Ids are handed out from the head of the free list (initially increasing) and freed ones
    join its tail. `num_blocks` may be 0 (no swap space): every non-empty allocation fails.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """Take `n` host blocks; None and no change when fewer than `n` are free."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n > len(self._free):
            return None
        blocks = [self._free.popleft() for _ in range(n)]
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

    def check_integrity(self, used: Collection[int]) -> None:
        """Raise KVCacheIntegrityError unless the held ids are exactly `used` (each held once)
        and the free list holds every other id exactly once."""
        owners = Counter(used)
        shared = [b for b, count in owners.items() if count > 1]
        if shared:
            raise KVCacheIntegrityError(f"host block {min(shared)}: held by more than one owner")
        if self._used != owners.keys():
            stray = min(self._used.symmetric_difference(owners))
            raise KVCacheIntegrityError(f"host block {stray}: held set disagrees with owners")
        free = Counter(self._free)
        bad = [b for b, count in free.items() if count > 1]
        bad += set(range(self.num_blocks)).difference(self._used).symmetric_difference(free)
        if bad:
            raise KVCacheIntegrityError(f"host block {min(bad)}: wrong on the free list")
