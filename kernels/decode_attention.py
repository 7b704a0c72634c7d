"""Paged decode attention: one new query token per sequence over its paged K/V (with GQA).

Contract (both implementations):
    query:        [batch, num_q_heads, head_dim], the LAST token of each sequence (its K/V is
                  already in the cache)
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], any strides
    block_tables: int32 [batch, max_blocks_per_seq]; entries past a sequence's context are
                  padding and never read
    context_lens: int32 [batch], cached tokens per sequence including the current one; 0 marks a
                  padding row, whose output is zeros
    scale:        softmax scale (usually head_dim ** -0.5)
Query head h reads kv head h // (num_q_heads // num_kv_heads). Softmax in fp32.
Returns a new tensor shaped and typed like `query`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F



def _check(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           block_tables: torch.Tensor, context_lens: torch.Tensor) -> int:
    """Validate shapes; return the GQA group size (query heads per kv head)."""
    if query.dim() != 3:
        raise ValueError(f"query must be [batch, q_heads, head_dim], got {tuple(query.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache/v_cache must both be [blocks, block_size, kv_heads, head_dim], "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    batch, num_q_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"cache head_dim {k_cache.shape[3]} != query head_dim {head_dim}")
    if num_q_heads % num_kv_heads != 0:
        raise ValueError(f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads "
                         f"{num_kv_heads}")
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be [{batch}, max_blocks], got "
                         f"{tuple(block_tables.shape)}")
    if context_lens.shape != (batch,):
        raise ValueError(f"context_lens must be [{batch}], got {tuple(context_lens.shape)}")
    return num_q_heads // num_kv_heads


def paged_decode_attention_ref(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_tables: torch.Tensor, context_lens: torch.Tensor,
                               scale: float) -> torch.Tensor:
    """Torch reference of `paged_decode_attention`, vectorized over the batch (CPU hot path).

    Builds one [batch, max_len] gather index of (block, offset) pairs, gathers K/V into padded
    [batch, max_len, kv_heads, head_dim] tensors and runs one masked fp32 SDPA over the batch.
    Positions past a context gather position 0 of the same sequence instead (masked out, but
    finite, so stale cache slots are never read, even when they hold NaN).
    """
    group = _check(query, k_cache, v_cache, block_tables, context_lens)
    batch, num_q_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    lens = context_lens.to(device=query.device, dtype=torch.long)
    max_len = int(lens.max()) if batch > 0 else 0
    if max_len == 0:
        return torch.zeros_like(query)

    positions = torch.arange(max_len, device=query.device)
    valid = positions[None, :] < lens[:, None]  # [batch, max_len]
    safe = torch.where(valid, positions[None, :], 0)
    tables = block_tables[:, : -(-max_len // block_size)].to(device=query.device,
                                                             dtype=torch.long)
    blocks, offsets = torch.gather(tables, 1, safe // block_size), safe % block_size
    # [batch, max_len, kv, d] -> [batch, kv, max_len, d]; queries -> [batch, kv, group, d]
    k = k_cache[blocks, offsets].transpose(1, 2).float()
    v = v_cache[blocks, offsets].transpose(1, 2).float()
    q = query.float().reshape(batch, num_kv_heads, group, head_dim)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :],
                                         scale=scale)
    # A padding row (context 0) is fully masked (NaN or garbage): zeros instead.
    out = torch.where((lens > 0)[:, None, None, None], out, torch.zeros((), device=out.device))
    return out.reshape(batch, num_q_heads, head_dim).to(query.dtype)


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
