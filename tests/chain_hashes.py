"""Chain hashes computed from scratch, the reference the KV manager's kept hashes are
checked against."""

from __future__ import annotations

from kvcache.prefix_hash import hash_block


def scratch_hashes(tokens: list[int], block_size: int) -> list[int]:
    """The chained hashes of `tokens`' full blocks, straight from `hash_block`."""
    hashes: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        hashes.append(hash_block(hashes[-1] if hashes else None,
                                 tokens[start:start + block_size]))
    return hashes
