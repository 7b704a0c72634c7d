"""Device block ids with ref counts, an LRU free list and the prefix-cache index."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from kvcache.errors import KVCacheIntegrityError


class BlockPool:
    """Owns block ids `0..num_blocks-1`: who holds them (ref counts) and what they cache.

    Block 0 is the null block when `reserve_null_block`: never handed out, never free or used.
    A block with ref count 0 sits on the free list, least recently freed at the head; it may
    still be in the prefix index ("cached free") and can be revived by `incref` until
    `allocate` takes it, which evicts it from the index. The pool only counts owners; who they
    are is the caller's business (`check_integrity` compares against the caller's view).
    """

    def __init__(self, num_blocks: int, reserve_null_block: bool = True) -> None:
        first = 1 if reserve_null_block else 0
        if num_blocks - first < 1:
            raise ValueError(f"num_blocks must leave at least one usable block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.null_block: int | None = 0 if reserve_null_block else None
        self._first = first
        self._refs = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(first, num_blocks))
        self._index: dict[int, int] = {}  # block hash -> block id
        self._hash_of: dict[int, int] = {}  # cached block id -> its hash
        self._tokens_of: dict[int, tuple[int, ...]] = {}  # cached block id -> its token ids

    @property
    def num_usable(self) -> int:
        """Blocks that can ever be handed out (all but the null block)."""
        return self.num_blocks - self._first

    @property
    def num_free(self) -> int:
        """Blocks with ref count 0, including cached ones that can still be revived."""
        return len(self._free)

    @property
    def num_cached_free(self) -> int:
        """Blocks with ref count 0 that are still findable in the prefix index."""
        return sum(1 for block in self._hash_of if self._refs[block] == 0)

    def ref_count(self, block_id: int) -> int:
        """Number of owners of `block_id` (always 0 for the null block)."""
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block_id must be in [0, {self.num_blocks}), got {block_id}")
        return self._refs[block_id]

    def is_cached(self, block_id: int) -> bool:
        """Whether the block is in the prefix index (whatever its ref count)."""
        return block_id in self._hash_of

    def allocate(self, n: int) -> list[int] | None:
        """Take `n` blocks from the head of the free list, each with ref count 1.

        Returns None and changes nothing when fewer than `n` blocks are free. A taken block
        that was cached is evicted from the prefix index: its content is about to be overwritten.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n > len(self._free):
            return None
        blocks = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            self._evict(block)
            self._refs[block] = 1
            blocks.append(block)
        return blocks

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one ref from each block, last block first; blocks reaching 0 join the tail.

        Give a call's table in table order: its tail blocks then become free (and so evicted)
        before its prefix blocks. Raises KVCacheIntegrityError, changing nothing, if a block
        would drop below ref count 0.
        """
        for block, count in Counter(block_ids).items():
            if self._refs[self._check_id(block)] < count:
                raise KVCacheIntegrityError(
                    f"block {block}: freed {count} time(s) with ref count {self._refs[block]}"
                )
        for block in reversed(block_ids):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None

    def incref(self, block_ids: Iterable[int]) -> None:
        """Add one ref to each block; a free block leaves the free list, keeping its content."""
        for block in block_ids:
            if self._refs[self._check_id(block)] == 0:
                del self._free[block]
            self._refs[block] += 1

    def register(self, block_id: int, block_hash: int, token_ids: Sequence[int]) -> None:
        """Record a full, computed, held block under `block_hash` in the prefix index.

        No-op if the hash already names a block (the first copy stays the cached one) or the
        block is already registered under this hash. Raises KVCacheIntegrityError for a free
        block or a block already cached under another hash.
        """
        if self._refs[self._check_id(block_id)] == 0:
            raise KVCacheIntegrityError(f"block {block_id}: registered while free")
        if block_hash in self._index:
            return
        if block_id in self._hash_of:
            raise KVCacheIntegrityError(f"block {block_id}: already cached under another hash")
        self._index[block_hash] = block_id
        self._hash_of[block_id] = block_hash
        self._tokens_of[block_id] = tuple(token_ids)

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> int | None:
        """The cached block with this hash AND these token ids, else None. Changes nothing."""
        block = self._index.get(block_hash)
        if block is None or self._tokens_of[block] != tuple(token_ids):
            return None
        return block

    def check_integrity(self, expected_refs: Mapping[int, int]) -> None:
        """Raise KVCacheIntegrityError unless the pool agrees with `expected_refs`.

        `expected_refs` maps block id -> number of owners; absent blocks must have ref 0.
        Checks: every ref count; the free list holds exactly the ref-0 usable blocks, each once
        (so free + used == usable); the prefix index and its reverse maps agree.
        """
        for block, expected in expected_refs.items():
            if expected and not self._first <= block < self.num_blocks:
                raise KVCacheIntegrityError(f"block {block}: held but not a usable block id")
        for block in range(self.num_blocks):
            expected = expected_refs.get(block, 0)
            if self._refs[block] != expected:
                raise KVCacheIntegrityError(
                    f"block {block}: ref count {self._refs[block]}, expected {expected}"
                )
        zero = [b for b in range(self._first, self.num_blocks) if self._refs[b] == 0]
        if sorted(self._free) != zero:
            stray = min(set(self._free).symmetric_difference(zero))
            raise KVCacheIntegrityError(
                f"block {stray}: free list ({len(self._free)} blocks) disagrees with ref counts "
                f"({len(zero)} free + {self.num_usable - len(zero)} used)"
            )
        for block_hash, block in self._index.items():
            if self._hash_of.get(block) != block_hash or block not in self._tokens_of:
                raise KVCacheIntegrityError(f"block {block}: index entry has a stale hash")
        for block, block_hash in self._hash_of.items():
            if self._index.get(block_hash) != block:
                raise KVCacheIntegrityError(f"block {block}: cached but not in the index")
        orphans = self._tokens_of.keys() - self._hash_of.keys()
        if orphans:
            raise KVCacheIntegrityError(f"block {min(orphans)}: token ids kept but not cached")

    def _evict(self, block: int) -> None:
        block_hash = self._hash_of.pop(block, None)
        if block_hash is not None:
            del self._index[block_hash]
            del self._tokens_of[block]

    def _check_id(self, block_id: int) -> int:
        if not self._first <= block_id < self.num_blocks:
            raise ValueError(
                f"block_id must be in [{self._first}, {self.num_blocks}), got {block_id}"
            )
        return block_id
