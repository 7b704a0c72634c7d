"""Paged prefill attention: causal attention of prefill chunks over a cached prefix (with GQA).

Contract (both implementations):
    query:           [total_query_tokens, num_q_heads, head_dim], every sequence's chunk
                     concatenated in batch order
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], any strides
    block_tables:    int32 [batch, max_blocks_per_seq]
    query_start_loc: int32 [batch + 1], cumulative chunk offsets into `query` (starts at 0)
    context_lens:    int32 [batch], cached tokens per sequence, the chunk included
    scale:           softmax scale
    window:          sliding-window attention: a query at position p attends keys
                     p - window < k <= p only (0: all keys up to p); blocks wholly before
                     the window of a chunk's first query are never read
Sequence i's chunk has q_len = query_start_loc[i+1] - query_start_loc[i] tokens: the LAST q_len
of its context_lens[i] tokens, all already stored in the cache (context_lens[i] >= q_len). Chunk
query j sits at position p = context_lens[i] - q_len + j and attends to key positions 0..p.
Query head h reads kv head h // (num_q_heads // num_kv_heads). Softmax in fp32.
Returns a new tensor shaped and typed like `query`.
"""

from __future__ import annotations

import torch

from agentix_kernels.shapes import check_query_and_cache


def _check(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           block_tables: torch.Tensor, query_start_loc: torch.Tensor,
           context_lens: torch.Tensor) -> int:
    """Validate shapes; return the GQA group size (query heads per kv head)."""
    group = check_query_and_cache(query, k_cache, v_cache, "tokens")
    batch = context_lens.shape[0] if context_lens.dim() == 1 else -1
    if batch < 0 or query_start_loc.shape != (batch + 1,):
        raise ValueError(f"context_lens must be [batch] and query_start_loc [batch + 1], got "
                         f"{tuple(context_lens.shape)} and {tuple(query_start_loc.shape)}")
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be [{batch}, max_blocks], got "
                         f"{tuple(block_tables.shape)}")
    return group


def paged_prefill_attention_ref(query: torch.Tensor, k_cache: torch.Tensor,
                                v_cache: torch.Tensor, block_tables: torch.Tensor,
                                query_start_loc: torch.Tensor, context_lens: torch.Tensor,
                                scale: float, window: int = 0) -> torch.Tensor:
    """Torch reference of `paged_prefill_attention` (loops over sequences, fp32 math; blocks
    wholly before the window of a chunk's first query are not read)."""
    group = _check(query, k_cache, v_cache, block_tables, query_start_loc, context_lens)
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    starts = query_start_loc.tolist()
    lens = context_lens.tolist()
    tables = block_tables.to(device=k_cache.device, dtype=torch.long)
    out = torch.zeros_like(query)
    for i, ctx in enumerate(lens):
        start, end = starts[i], starts[i + 1]
        q_len = end - start
        if q_len == 0:
            continue
        if ctx < q_len:
            raise ValueError(f"sequence {i}: context_lens {ctx} < chunk length {q_len}")
        # Keys from the block of the first one the chunk's first query sees (0 without a window).
        first = max(0, ctx - q_len - window + 1) // block_size * block_size if window else 0
        block_ids = tables[i, first // block_size: -(-ctx // block_size)]
        # [keys, kv, d] -> [kv, 1, keys, d]; queries [q_len, q_heads, d] -> [kv, group, q_len, d]
        k = k_cache.index_select(0, block_ids).reshape(-1, num_kv_heads, head_dim)[:ctx - first]
        v = v_cache.index_select(0, block_ids).reshape(-1, num_kv_heads, head_dim)[:ctx - first]
        k = k.float().permute(1, 0, 2).unsqueeze(1)
        v = v.float().permute(1, 0, 2).unsqueeze(1)
        q = query[start:end].float().reshape(q_len, num_kv_heads, group, head_dim)
        q = q.permute(1, 2, 0, 3) * scale
        scores = torch.matmul(q, k.transpose(-1, -2))  # [kv, group, q_len, keys]
        q_pos = torch.arange(ctx - q_len, ctx, device=query.device)
        k_pos = torch.arange(first, ctx, device=query.device)
        causal = k_pos[None, :] <= q_pos[:, None]
        if window > 0:
            causal &= k_pos[None, :] > q_pos[:, None] - window
        scores = scores.masked_fill(~causal, float("-inf"))
        o = torch.matmul(torch.softmax(scores, dim=-1), v)  # [kv, group, q_len, d]
        out[start:end] = o.permute(2, 0, 1, 3).reshape(q_len, num_q_heads, head_dim).to(out.dtype)
    return out


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, query_start_loc: torch.Tensor,
                            context_lens: torch.Tensor, scale: float,
                            window: int = 0) -> torch.Tensor:
    """Triton `paged_prefill_attention` (contract in the module docstring).

    Any cache block size and head_dim work (head_dim is padded to a power of two internally).
    No device-to-host sync. Tensors on CUDA, or on CPU under TRITON_INTERPRET=1.
    """
    group = _check(query, k_cache, v_cache, block_tables, query_start_loc, context_lens)
    out = torch.empty_like(query)
    if query.shape[0] == 0 or context_lens.shape[0] == 0:
        return out
    from agentix_kernels._prefill_attention_triton import launch_paged_prefill  # imports triton

    launch_paged_prefill(query, k_cache, v_cache, block_tables, query_start_loc, context_lens,
                         scale, group, out, window)
    return out
