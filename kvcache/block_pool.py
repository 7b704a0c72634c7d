"""Device block ids with ref counts, a ranked free list and the prefix-cache index."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from kvcache.errors import KVCacheIntegrityError
from kvcache.cache_events import CacheDigest, CacheEvents
from kvcache.prefix_index import PrefixIndex
from kvcache.ranked_free_list import RankedFreeList

# Called for each cached block an allocation evicts: (block, hash, token ids, rank, owner).
EvictionHook = Callable[[int, int, tuple[int, ...], float, Hashable], None]


class BlockPool:
    """Owns block ids `0..num_blocks-1`: who holds them (ref counts) and what they cache.

    Block 0 is the null block when `reserve_null_block`: never handed out, never free or used.
    A block with ref count 0 is free. A free block without cached content sits on a plain
    FIFO list; a free block still in the prefix index ("cached free") sits on a ranked list
    with the rank and owner given when it was freed, and can be revived by `incref` until an
    allocation evicts it. Allocation takes plain blocks first, then cached ones lowest rank
    first, least recently freed first inside a rank; it may be limited to ranks up to a bound
    (admission control). Ranks are opaque numbers: the pool knows no policy. The pool only
    counts owners; who they are is the caller's business (`check_integrity` compares against
    the caller's view).
    """

    def __init__(self, num_blocks: int, reserve_null_block: bool = True) -> None:
        first = 1 if reserve_null_block else 0
        if num_blocks - first < 1:
            raise ValueError(f"num_blocks must leave at least one usable block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.null_block: int | None = 0 if reserve_null_block else None
        self._first = first
        self._refs = [0] * num_blocks
        self._plain: OrderedDict[int, None] = OrderedDict.fromkeys(range(first, num_blocks))
        self._cached = RankedFreeList()
        self.events = CacheEvents()  # KV events of what the prefix cache holds
        self._index = PrefixIndex("block", self.events)

    def cache_digest(self, epoch: int, since: int) -> CacheDigest:
        """The KV events after `since` of `epoch` (`CacheEvents.digest`)."""
        return self.events.digest(epoch, since, self._index.hashes)

    @property
    def num_usable(self) -> int:
        """Blocks that can ever be handed out (all but the null block)."""
        return self.num_blocks - self._first

    @property
    def num_free(self) -> int:
        """Blocks with ref count 0, including cached ones that can still be revived."""
        return len(self._plain) + len(self._cached)

    @property
    def num_cached_free(self) -> int:
        """Blocks with ref count 0 that are still findable in the prefix index."""
        return len(self._cached)

    def num_evictable(self, max_rank: float = float("inf")) -> int:
        """Free blocks an allocation limited to `max_rank` may take."""
        return len(self._plain) + self._cached.count_at_most(max_rank)

    def ref_count(self, block_id: int) -> int:
        """Number of owners of `block_id` (always 0 for the null block)."""
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block_id must be in [0, {self.num_blocks}), got {block_id}")
        return self._refs[block_id]

    def is_cached(self, block_id: int) -> bool:
        """Whether the block is in the prefix index (whatever its ref count)."""
        return block_id in self._index

    def free_rank(self, block_id: int) -> float | None:
        """The rank of a cached free block, None for any other block."""
        return self._cached.rank_of(block_id) if block_id in self._cached else None

    def allocate(self, n: int, max_rank: float = float("inf"),
                 on_evict: EvictionHook | None = None) -> list[int] | None:
        """Take `n` blocks, each with ref count 1: plain free blocks first, then cached free
        blocks of rank <= `max_rank`, lowest rank first.

        Returns None and changes nothing when fewer than `n` such blocks are free. A taken
        cached block leaves the prefix index (its content is about to be overwritten);
        `on_evict` hears of it first, so its content can still be copied out this step.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n > len(self._plain) and n > self.num_evictable(max_rank):
            return None
        blocks = []
        for _ in range(n):
            if self._plain:
                block, _ = self._plain.popitem(last=False)
            else:
                block, rank = self._cached.lowest()  # type: ignore[misc]
                owner = self._cached.owner_of(block)
                self._cached.remove(block)
                if on_evict is not None:
                    block_hash, tokens = self._index.entry(block)
                    on_evict(block, block_hash, tokens, rank, owner)
                self._index.remove(block)
            self._refs[block] = 1
            blocks.append(block)
        return blocks

    def free(self, block_ids: Sequence[int], owner: Hashable = None, rank: float = 0.0) -> None:
        """Drop one ref from each block, last block first; a block reaching 0 becomes the most
        recent free block: cached ones with `rank` and `owner`, others on the plain list.

        Give a call's table in table order: its tail blocks are then evicted before its prefix
        blocks. Raises KVCacheIntegrityError, changing nothing, if a block would drop below
        ref count 0.
        """
        self._check_free(block_ids)
        refs, index, cached = self._refs, self._index, []
        for block in reversed(block_ids):
            refs[block] -= 1
            if refs[block] == 0:
                if block in index:
                    cached.append(block)
                else:
                    self._plain[block] = None
        if cached:
            self._cached.add_many(cached, rank, owner)

    def _check_free(self, block_ids: Sequence[int]) -> None:
        """Raise (ValueError, KVCacheIntegrityError) unless each listed block is a usable id
        held at least as many times as it is listed, checked in first-listed order."""
        refs, first, end = self._refs, self._first, self.num_blocks
        if len(set(block_ids)) == len(block_ids):  # the common case: each block listed once
            for block in block_ids:
                if not (first <= block < end and refs[block] >= 1):
                    break
            else:
                return
        for block, count in Counter(block_ids).items():
            if refs[self._check_id(block)] < count:
                raise KVCacheIntegrityError(
                    f"block {block}: freed {count} time(s) with ref count {refs[block]}"
                )

    def num_cached_free_of(self, owner: Hashable) -> int:
        """Cached free blocks last freed by `owner`."""
        return self._cached.count_of(owner)

    @property
    def num_counted_free(self) -> int:
        """Cached free blocks of the owners marked counted (`set_counted`)."""
        return self._cached.num_counted

    def set_counted(self, owner: Hashable, counted: bool) -> None:
        """Count `owner`'s cached free blocks, now and later, in `num_counted_free` (or stop
        counting them): evicting or reviving one takes it out of the count."""
        self._cached.set_counted(owner, counted)

    def set_rank(self, owner: Hashable, rank: float) -> int:
        """Re-rank every cached free block last freed by `owner`; returns how many moved."""
        return self._cached.set_rank(owner, rank)

    def incref(self, block_ids: Iterable[int]) -> None:
        """Add one ref to each block; a free block leaves the free list, keeping its content.
        ValueError, changing nothing, for an id that is not a usable block."""
        block_ids = list(block_ids)
        if block_ids and not (self._first <= min(block_ids) and max(block_ids) < self.num_blocks):
            for block in block_ids:
                self._check_id(block)
        refs, cached, revived = self._refs, self._cached, []
        for block in block_ids:
            if refs[block] == 0:
                if block in cached:
                    revived.append(block)
                else:
                    del self._plain[block]
            refs[block] += 1
        if revived:
            cached.remove_many(revived)

    def register(self, block_id: int, block_hash: int, token_ids: Sequence[int]) -> None:
        """Record a full, computed, held block under `block_hash` in the prefix index.

        No-op if the hash already names a block (the first copy stays the cached one) or the
        block is already registered under this hash. Raises KVCacheIntegrityError for a free
        block or a block already cached under another hash.
        """
        if self._refs[self._check_id(block_id)] == 0:
            raise KVCacheIntegrityError(f"block {block_id}: registered while free")
        if self._index.has_hash(block_hash):
            return
        if block_id in self._index:
            raise KVCacheIntegrityError(f"block {block_id}: already cached under another hash")
        self._index.add(block_id, block_hash, token_ids)

    def unregister(self, block_id: int) -> None:
        """Drop the block from the prefix index (its content is not what the index says); a
        cached free block becomes plain free. No-op for a block not in the index."""
        if block_id not in self._index:
            return
        self._index.remove(block_id)
        if block_id in self._cached:
            self._cached.remove(block_id)
            self._plain[block_id] = None

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> int | None:
        """The cached block with this hash AND these token ids, else None. Changes nothing."""
        return self._index.lookup(block_hash, token_ids)

    def lookup_run(self, hashes: Sequence[int], token_ids: Sequence[int], first: int, end: int,
                   block_size: int) -> list[int]:
        """`lookup` of a chain of full blocks, up to the first miss (`PrefixIndex.lookup_run`).
        Changes nothing."""
        return self._index.lookup_run(hashes, token_ids, first, end, block_size)

    def has_hash(self, block_hash: int) -> bool:
        return self._index.has_hash(block_hash)

    def check_integrity(self, expected_refs: Mapping[int, int]) -> None:
        """Raise KVCacheIntegrityError unless the pool agrees with `expected_refs`.

        `expected_refs` maps block id -> number of owners; absent blocks must have ref 0.
        Checks: every ref count; the free lists hold exactly the ref-0 usable blocks, each once
        (so free + cached + used == usable); cached free blocks are exactly the indexed free
        ones; the prefix index and its reverse maps agree.
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
        zero = {b for b in range(self._first, self.num_blocks) if self._refs[b] == 0}
        plain, cached = set(self._plain), set(self._cached)
        if plain & cached or (plain | cached) != zero:
            stray = min((plain & cached) or (plain | cached).symmetric_difference(zero))
            raise KVCacheIntegrityError(
                f"block {stray}: free lists ({len(plain)} plain + {len(cached)} cached) "
                f"disagree with ref counts ({len(zero)} free + {self.num_usable - len(zero)} used)"
            )
        indexed = self._index.blocks()
        wrong = (cached - indexed) | (plain & indexed)
        if wrong:
            raise KVCacheIntegrityError(f"block {min(wrong)}: on the wrong free list for its "
                                        f"cache state")
        self._index.check_integrity()
        self._cached.check_integrity()

    def _check_id(self, block_id: int) -> int:
        if not self._first <= block_id < self.num_blocks:
            raise ValueError(
                f"block_id must be in [{self._first}, {self.num_blocks}), got {block_id}"
            )
        return block_id
