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
