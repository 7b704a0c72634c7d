"""Paged decode attention: one new query token per sequence over its paged K/V (with GQA).

Contract (both implementations):
    query:        [batch, num_q_heads, head_dim], the LAST token of each sequence (its K/V is
                  already in the cache)
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], any strides
    block_tables: int32 [batch, max_blocks_per_seq]; entries past a sequence's context are
                  padding (the null block); the reference reads them masked, the kernel never
    context_lens: int32 [batch], cached tokens per sequence including the current one; 0 marks a
                  padding row, whose output is zeros
    scale:        softmax scale (usually head_dim ** -0.5)
Query head h reads kv head h // (num_q_heads // num_kv_heads). Softmax in fp32.
Returns a new tensor shaped and typed like `query`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.shapes import check_query_and_cache



def _check(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           block_tables: torch.Tensor, context_lens: torch.Tensor) -> int:
    """Validate shapes; return the GQA group size (query heads per kv head)."""
    group = check_query_and_cache(query, k_cache, v_cache, "batch")
    batch = query.shape[0]
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be [{batch}, max_blocks], got "
                         f"{tuple(block_tables.shape)}")
    if context_lens.shape != (batch,):
        raise ValueError(f"context_lens must be [{batch}], got {tuple(context_lens.shape)}")
    return group


ROWS_PER_GROUP = 8  # the reference pads each group of similar-length rows separately


def paged_decode_attention_ref(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_tables: torch.Tensor, context_lens: torch.Tensor,
                               scale: float) -> torch.Tensor:
    """Torch reference of `paged_decode_attention`, vectorized over the batch (CPU hot path).

    Rows are sorted by context length and taken in groups of `ROWS_PER_GROUP`, so each group
    is padded only to its own longest context. A group gathers whole blocks (one
    `index_select`, a memcpy per block) into [rows, blocks * block_size, kv_heads, head_dim]
    and runs one masked SDPA. Slots past a context are read and masked out, so they must hold
    finite values (the engine's cache starts zeroed and only finite K/V are written).
    """
    group = _check(query, k_cache, v_cache, block_tables, context_lens)
    batch, num_q_heads, head_dim = query.shape
    out = torch.zeros_like(query)
    lens = context_lens.to(dtype=torch.long)
    order = torch.argsort(lens.cpu(), descending=True)
    sorted_lens = lens.cpu()[order].tolist()
    for first in range(0, batch, ROWS_PER_GROUP):
        if sorted_lens[first] == 0:
            break
        rows = order[first:first + ROWS_PER_GROUP].to(query.device)
        out[rows] = _attend_group(query[rows], k_cache, v_cache, block_tables[rows], lens[rows],
                                  sorted_lens[first], group, scale)
    return out


def _attend_group(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor, lens: torch.Tensor, max_len: int, group: int,
                  scale: float) -> torch.Tensor:
    """Decode attention of rows whose longest context is `max_len`; zeros for empty rows."""
    rows, num_q_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    num_blocks = -(-max_len // block_size)
    padded = num_blocks * block_size
    ids = block_tables[:, :num_blocks].to(device=k_cache.device, dtype=torch.long).flatten()
    # [rows, padded, kv, d] -> [rows, kv, padded, d]; queries -> [rows, kv, group, d]
    k = k_cache.index_select(0, ids).view(rows, padded, num_kv_heads, head_dim).transpose(1, 2)
    v = v_cache.index_select(0, ids).view(rows, padded, num_kv_heads, head_dim).transpose(1, 2)
    q = query.reshape(rows, num_kv_heads, group, head_dim)
    valid = torch.arange(padded, device=query.device)[None, :] < lens[:, None]
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                         attn_mask=valid[:, None, None, :], scale=scale)
    # A row with context 0 is fully masked (NaN): zeros instead.
    out = torch.where((lens > 0)[:, None, None, None], out, torch.zeros((), device=out.device))
    return out.reshape(rows, num_q_heads, head_dim).to(query.dtype)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float) -> torch.Tensor:
    """Triton `paged_decode_attention` (contract in the module docstring).

    Requires block_size to be a power of two (the kernel tiles the context by blocks). Tensors
    on CUDA, or on CPU under TRITON_INTERPRET=1.
    """
    group = _check(query, k_cache, v_cache, block_tables, context_lens)
    block_size = k_cache.shape[1]
    if block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two for the Triton kernel, got "
                         f"{block_size}")
    out = torch.empty_like(query)
    if query.shape[0] == 0:
        return out
    from kernels._decode_attention_triton import launch_paged_decode  # imports triton

    launch_paged_decode(query, k_cache, v_cache, block_tables, context_lens, scale, group, out)
    return out
