"""Block hash <-> block id, with each cached block's token ids (one index per memory tier),
and, for the device tier, the KV events of what it indexes and forgets."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from kvcache.cache_events import CacheEvents
from kvcache.errors import KVCacheIntegrityError


class PrefixIndex:
    """At most one block per hash and one hash per block; a hit also compares token ids, so a
    hash collision can never serve another prefix's KV. `events` (None: not kept) logs each
    hash indexed and forgotten."""

    def __init__(self, tier: str, events: CacheEvents | None = None) -> None:
        self.tier = tier  # "block" or "host block", for messages
        self.events = events
        self._block_of: dict[int, int] = {}
        self._hash_of: dict[int, int] = {}
        self._tokens_of: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._hash_of)

    def __contains__(self, block: int) -> bool:
        return block in self._hash_of

    def has_hash(self, block_hash: int) -> bool:
        return block_hash in self._block_of

    def blocks(self) -> set[int]:
        return set(self._hash_of)

    def hashes(self) -> list[int]:
        return list(self._block_of)

    def add(self, block: int, block_hash: int, token_ids: Sequence[int]) -> None:
        """Index `block` under `block_hash`; the caller checked that neither is indexed."""
        self._block_of[block_hash] = block
        self._hash_of[block] = block_hash
        self._tokens_of[block] = tuple(token_ids)
        if self.events is not None:
            self.events.stored(block_hash)

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> int | None:
        """The block with this hash AND these token ids, else None."""
        block = self._block_of.get(block_hash)
        if block is None or self._tokens_of[block] != tuple(token_ids):
            return None
        return block

    def lookup_run(self, hashes: Sequence[int], token_ids: Sequence[int], first: int, end: int,
                   block_size: int) -> list[int]:
        """`lookup` of the full blocks `first`, `first + 1`, ... before `end` of `token_ids`
        (`hashes[i]`: block i's chain hash): the blocks found, up to the first miss. The
        hashes are looked up, and the run's token ids compared, in bulk; only a run whose
        tokens differ somewhere (a hash collision) is walked block by block."""
        found = list(map(self._block_of.get, hashes[first:end]))
        if None in found:
            del found[found.index(None):]
        start, stop = first * block_size, (first + len(found)) * block_size
        if list(chain.from_iterable(map(self._tokens_of.__getitem__, found))) == \
                list(token_ids[start:stop]):
            return found
        for n, block in enumerate(found):
            at = start + n * block_size
            if self._tokens_of[block] != tuple(token_ids[at:at + block_size]):
                return found[:n]
        return found

    def entry(self, block: int) -> tuple[int, tuple[int, ...]]:
        """(hash, token ids) of an indexed block."""
        return self._hash_of[block], self._tokens_of[block]

    def remove(self, block: int) -> None:
        """Forget `block` if it is indexed."""
        block_hash = self._hash_of.pop(block, None)
        if block_hash is not None:
            del self._block_of[block_hash]
            del self._tokens_of[block]
            if self.events is not None:
                self.events.removed(block_hash)

    def check_integrity(self) -> None:
        for block_hash, block in self._block_of.items():
            if self._hash_of.get(block) != block_hash or block not in self._tokens_of:
                raise KVCacheIntegrityError(f"{self.tier} {block}: index entry has a stale hash")
        for block, block_hash in self._hash_of.items():
            if self._block_of.get(block_hash) != block:
                raise KVCacheIntegrityError(f"{self.tier} {block}: cached but not in the index")
        orphans = self._tokens_of.keys() - self._hash_of.keys()
        if orphans:
            raise KVCacheIntegrityError(
                f"{self.tier} {min(orphans)}: token ids kept but not cached")
