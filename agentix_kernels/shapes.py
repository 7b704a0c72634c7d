"""Shape checks shared by the attention kernels and their references."""

from __future__ import annotations

import torch


def check_query_and_cache(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          query_layout: str) -> int:
    """Validate query `[n, q_heads, head_dim]` against the paged caches `[blocks, block_size,
    kv_heads, head_dim]`; return the GQA group size (query heads per kv head)."""
    if query.dim() != 3:
        raise ValueError(f"query must be [{query_layout}, q_heads, head_dim], got "
                         f"{tuple(query.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache/v_cache must both be [blocks, block_size, kv_heads, head_dim], "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"cache head_dim {k_cache.shape[3]} != query head_dim {head_dim}")
    if num_q_heads % num_kv_heads != 0:
        raise ValueError(f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads "
                         f"{num_kv_heads}")
    return num_q_heads // num_kv_heads
