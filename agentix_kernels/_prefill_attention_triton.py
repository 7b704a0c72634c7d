"""Triton kernel of `agentix_kernels.prefill_attention.paged_prefill_attention` (imported on
first use: needs triton)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from agentix_kernels._paged_tiles_triton import load_kv_tile, native_dot, pv_dot, qk_dot

_LOG2E = 1.4426950408889634
_BLOCK_M = 32  # chunk queries per program
_BLOCK_N = 32  # keys per inner iteration (independent of the cache block size)


@triton.jit
def _paged_prefill_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, query_start_loc_ptr, context_lens_ptr, out_ptr,
    qk_scale, window,
    stride_qt, stride_qh, stride_qd,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_btb, stride_btn,
    stride_ot, stride_oh, stride_od,
    block_size,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NATIVE_DOT: tl.constexpr,
):
    # One program per (sequence, q head, tile of BLOCK_M chunk queries). Keys are visited in
    # tiles of BLOCK_N positions up to the tile's causal limit; each key's cache block comes from
    # the block table, so BLOCK_N need not match the cache block size. Online softmax in fp32.
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    tile = tl.program_id(2)
    kv_head = head // GROUP

    q_start = tl.load(query_start_loc_ptr + seq).to(tl.int32)
    q_len = tl.load(query_start_loc_ptr + seq + 1).to(tl.int32) - q_start
    context_len = tl.load(context_lens_ptr + seq).to(tl.int32)
    prefix_len = context_len - q_len

    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    m_mask = offs_m < q_len
    d_mask = offs_d < HEAD_DIM
    q_rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh
                + offs_d[None, :] * stride_qd, mask=m_mask[:, None] & d_mask[None, :], other=0.0)
    if NATIVE_DOT:
        q_dot = q
    else:
        q_dot = q.to(tl.float32)
    q_pos = prefix_len + offs_m  # absolute position of each query

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    # Keys past the last valid query of this tile are never needed; an empty tile loops 0 times.
    kv_end = tl.minimum(context_len, prefix_len + (tile + 1) * BLOCK_M)
    kv_end = tl.where(tile * BLOCK_M < q_len, kv_end, 0)
    kv_start = 0
    if window > 0:  # keys before the tile's first query's window are never needed
        kv_start = tl.maximum(prefix_len + tile * BLOCK_M - window + 1, 0)
    for start in range(kv_start, kv_end, BLOCK_N):
        k_pos = start + offs_n
        n_mask = k_pos < kv_end
        k, v = load_kv_tile(k_ptr, v_ptr, block_tables_ptr, seq, kv_head, k_pos, n_mask, offs_d,
                            d_mask, stride_btb, stride_btn, stride_kb, stride_kt, stride_kh,
                            stride_kd, stride_vb, stride_vt, stride_vh, stride_vd, block_size)
        s = qk_dot(q_dot, k, NATIVE_DOT) * qk_scale
        causal = (k_pos[None, :] <= q_pos[:, None]) & n_mask[None, :]
        if window > 0:
            causal = causal & (k_pos[None, :] > q_pos[:, None] - window)
        s = tl.where(causal, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked row so far
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + pv_dot(p, v, NATIVE_DOT)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + q_rows[:, None] * stride_ot + head * stride_oh
             + offs_d[None, :] * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & d_mask[None, :])


def launch_paged_prefill(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         block_tables: torch.Tensor, query_start_loc: torch.Tensor,
                         context_lens: torch.Tensor, scale: float, group: int,
                         out: torch.Tensor, window: int = 0) -> None:
    """Launch one program per (sequence, q head, BLOCK_M chunk queries), writing `out`;
    `window` > 0 lets a query at position p attend keys p - window < k <= p only.

    The tile count per sequence is cdiv(total_query_tokens, BLOCK_M), an upper bound known on
    the host (no device sync); tiles past a sequence's chunk do nothing.
    """
    total, num_q_heads, head_dim = query.shape
    grid = (context_lens.shape[0], num_q_heads, triton.cdiv(total, _BLOCK_M))
    _paged_prefill_kernel[grid](
        query, k_cache, v_cache, block_tables, query_start_loc, context_lens, out,
        float(scale) * _LOG2E, window,
        *query.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        *out.stride(),
        k_cache.shape[1],
        GROUP=group, HEAD_DIM=head_dim, HEAD_DIM_PAD=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_M=_BLOCK_M, BLOCK_N=_BLOCK_N, NATIVE_DOT=native_dot(query, k_cache),
    )
