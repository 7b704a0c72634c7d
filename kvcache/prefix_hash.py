"""Chained content hashes of full KV blocks, the keys of the prefix cache."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from hashlib import blake2b

_DIGEST_BYTES = 16


def hash_block(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Hash of one FULL block: blake2b-128 over the parent's hash and the packed token ids.

    `parent_hash` is the hash of the preceding block (`None` for the first block), so equal
    hashes mean equal prefixes up to and including this block. Callers still compare token ids
    on a hit; the hash only narrows the search. Token ids must fit in a signed 64-bit int.
    """
    h = blake2b(digest_size=_DIGEST_BYTES)
    if parent_hash is None:
        h.update(b"\x00")
    elif 0 <= parent_hash < 1 << (8 * _DIGEST_BYTES):
        h.update(b"\x01" + parent_hash.to_bytes(_DIGEST_BYTES, "little"))
    else:
        raise ValueError(f"parent_hash must come from hash_block, got {parent_hash}")
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little")


def shared_chain_hashes(earlier_tokens: Sequence[int], earlier_hashes: Sequence[int],
                        token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chain hashes of the leading full blocks `token_ids` shares with `earlier_tokens`,
    whose first `len(earlier_hashes)` full blocks hashed to `earlier_hashes`: a new list of
    `earlier_hashes[:k]` for the largest such k (the whole run when the token ids extend the
    earlier ones, the common case of a program's next call). Token ids are compared, never
    assumed; the cost is a few C-level list comparisons, no hashing."""
    n = min(len(earlier_hashes), len(token_ids) // block_size,
            len(earlier_tokens) // block_size)

    def same(k: int) -> bool:
        return token_ids[:k * block_size] == earlier_tokens[:k * block_size]

    if same(n):
        return list(earlier_hashes[:n])
    shared, differs = 0, n  # the first `shared` blocks are equal; the first `differs` are not
    while differs - shared > 1:
        mid = (shared + differs) // 2
        if same(mid):
            shared = mid
        else:
            differs = mid
    return list(earlier_hashes[:shared])


class BlockHashMemo:
    """A bounded memo of `hash_block` results: (parent hash, block token ids) -> hash.

    Agent programs re-send their growing history, so most blocks of an admitted prompt were
    hashed before (by the program's previous call, or by the same call before it was freed
    on preemption); a dict lookup is several times cheaper than a blake2b. Keys are compared
    by value, so a hit returns exactly what `hash_block` would: the memo never changes a
    result. It holds at most `capacity` entries, in two generations of `capacity // 2`: new
    entries go to the young one; when it is full it becomes the old one (the previous old one
    is dropped); a hit in the old generation is copied to the young one. So an entry lives
    at least `capacity // 2` insertions after its last use. Owned by one KVCacheManager.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        self.capacity = capacity
        self._young: dict[tuple[int | None, tuple[int, ...]], int] = {}
        self._old: dict[tuple[int | None, tuple[int, ...]], int] = {}

    def __len__(self) -> int:
        """Entries held, at most `capacity` (a key used while old is counted in both)."""
        return len(self._young) + len(self._old)

    def get(self, key: tuple[int | None, tuple[int, ...]]) -> int | None:
        """The hash memoised under `key` = (parent hash, token ids tuple), else None."""
        block_hash = self._young.get(key)
        if block_hash is None:
            block_hash = self._old.get(key)
            if block_hash is not None:
                self.put(key, block_hash)
        return block_hash

    def put(self, key: tuple[int | None, tuple[int, ...]], block_hash: int) -> None:
        """Memoise `block_hash` = `hash_block(*key)`, aging the young generation if full."""
        if len(self._young) >= self.capacity // 2:
            self._old, self._young = self._young, {}
        self._young[key] = block_hash
