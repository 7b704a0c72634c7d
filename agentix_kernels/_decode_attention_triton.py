"""Triton kernels of `agentix_kernels.decode_attention.paged_decode_attention` (imported on
first use: needs triton).

Grid `(batch, num_kv_heads, splits)`: one program per (sequence, kv head, split) serves all GROUP
query heads of that kv head at once, so each K/V block is read once per kv head, not once per
query head. q is a `[GROUP_PAD, HEAD_DIM_PAD]` tile (padding rows are zeros, never stored); keys
come in tiles of BLOCK_N = max(16, block_size) positions, each position's cache block looked up in
the block table, so tl.dot always sees dims >= 16. Per query head row, an online softmax in base
2 (log2(e) folded into the scale), all in fp32:
    s = q.K^T * scale * log2(e);  m' = max(m, max(s));  l = l * 2^(m - m') + sum(2^(s - m'))
    acc = acc * 2^(m - m') + 2^(s - m').V
With one split the program writes `acc / l`. With more (long contexts, see `num_splits`), split
`i` covers key positions `[i * split_len, (i + 1) * split_len)` of its sequence and writes its
partial `(m, l, acc)` to fp32 scratch; then `_combine_splits_kernel`, grid `(batch, num_q_heads)`,
merges a row's non-empty splits by log-sum-exp:
    M = max_i m_i;  out = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i
A context-0 row has no keys (no non-empty split) and gets zeros.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from agentix_kernels._paged_tiles_triton import load_kv_tile, native_dot, pv_dot, qk_dot

_LOG2E = 1.4426950408889634
BLOCKS_PER_SPLIT = 32  # cache blocks per split-K program once a context exceeds one split
MAX_SPLITS = 16  # a power of two: the combine kernel's split tile


def num_splits(max_blocks: int) -> int:
    """Split-K programs per (sequence, kv head) for a batch whose longest block table holds
    `max_blocks` blocks: 1 up to BLOCKS_PER_SPLIT blocks, else ceil(max_blocks /
    BLOCKS_PER_SPLIT), at most MAX_SPLITS."""
    return min(max(1, triton.cdiv(max_blocks, BLOCKS_PER_SPLIT)), MAX_SPLITS)


@triton.jit
def _split_keys(split, split_len, context_len, window):
    """Key positions `[start, end)` of `split` (scalar or tensor) in a context of `context_len`
    keys, of which only the last `window` are attended (0: all); empty when start >= end. The
    one split rule both kernels use."""
    start = split * split_len
    end = tl.minimum(start + split_len, context_len)
    if window > 0:
        start = tl.maximum(start, context_len - window)
    return start, end


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, context_lens_ptr, out_ptr,
    m_ptr, l_ptr, acc_ptr,
    qk_scale, split_len, window,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_btb, stride_btn,
    stride_ob, stride_oh, stride_od,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    NATIVE_DOT: tl.constexpr, SPLIT: tl.constexpr,
):
    # One program per (sequence, kv head, split); see the module docstring. SPLIT: write the
    # partial (m, l, acc) of each query head to the scratch rows (seq * num_q_heads + head) *
    # splits + split, else the normalized output.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq).to(tl.int32)
    key_start, key_end = _split_keys(split, split_len, context_len, window)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    gd_mask = g_mask[:, None] & d_mask[None, :]
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                mask=gd_mask, other=0.0)
    if not NATIVE_DOT:
        q = q.to(tl.float32)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    for start in range(key_start, key_end, BLOCK_N):
        k_pos = start + offs_n
        n_mask = k_pos < key_end  # every tile holds >= 1 key, so m_new below is finite
        k, v = load_kv_tile(k_ptr, v_ptr, block_tables_ptr, seq, kv_head, k_pos, n_mask, offs_d,
                            d_mask, stride_btb, stride_btn, stride_kb, stride_kt, stride_kh,
                            stride_kd, stride_vb, stride_vt, stride_vh, stride_vd, BLOCK_SIZE)
        s = tl.where(n_mask[None, :], qk_dot(q, k, NATIVE_DOT) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + pv_dot(p, v, NATIVE_DOT)
        m_i = m_new

    if SPLIT:
        rows = (seq * tl.num_programs(1) * GROUP + heads) * tl.num_programs(2) + split
        row_mask = g_mask & (key_start < key_end)
        tl.store(m_ptr + rows, m_i, mask=row_mask)
        tl.store(l_ptr + rows, l_i, mask=row_mask)
        tl.store(acc_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], acc,
                 mask=row_mask[:, None] & d_mask[None, :])
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # context 0: acc is 0, out is 0
        tl.store(out_ptr + seq * stride_ob + heads[:, None] * stride_oh
                 + offs_d[None, :] * stride_od, out.to(out_ptr.dtype.element_ty), mask=gd_mask)


@triton.jit
def _combine_splits_kernel(
    m_ptr, l_ptr, acc_ptr, context_lens_ptr, out_ptr,
    split_len, splits, window,
    stride_ob, stride_oh, stride_od,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, MAX_SPLITS: tl.constexpr,
):
    # One program per (sequence, q head): log-sum-exp merge of the row's non-empty splits
    # (the module docstring); empty splits wrote nothing and are masked by the same split rule.
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    context_len = tl.load(context_lens_ptr + seq).to(tl.int32)
    offs_s = tl.arange(0, MAX_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    d_mask = offs_d < HEAD_DIM
    key_start, key_end = _split_keys(offs_s, split_len, context_len, window)
    s_mask = (offs_s < splits) & (key_start < key_end)
    rows = (seq * tl.num_programs(1) + head) * splits + offs_s
    m = tl.load(m_ptr + rows, mask=s_mask, other=float("-inf"))
    l_s = tl.load(l_ptr + rows, mask=s_mask, other=0.0)
    acc = tl.load(acc_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=s_mask[:, None] & d_mask[None, :], other=0.0)
    top = tl.max(m, axis=0)  # -inf only for context 0 (no split)
    w = tl.exp2(m - tl.where(top > float("-inf"), top, 0.0))  # masked splits: m = -inf, w = 0
    total = tl.sum(w * l_s, axis=0)
    out = tl.sum(w[:, None] * acc, axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + offs_d * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=d_mask)


def launch_paged_decode(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                        group: int, out: torch.Tensor, window: int = 0) -> None:
    """Launch grid `(batch, num_kv_heads, num_splits(block_tables.shape[1]))`, then, with more
    than one split, the combine kernel; writes `out`. Arguments already validated.

    The split count comes from the table width (the engine pads tables to the batch's longest
    row), known on the host without a device sync. Each split covers `split_len` keys: the
    widest table's keys shared evenly, rounded up to whole key tiles.
    """
    batch, num_q_heads, head_dim = query.shape
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    head_dim_pad = max(16, triton.next_power_of_2(head_dim))
    block_n = max(16, block_size)
    splits = num_splits(block_tables.shape[1])
    split_blocks = triton.cdiv(block_tables.shape[1], splits)
    split_len = triton.cdiv(split_blocks * block_size, block_n) * block_n
    if splits > 1:
        m = torch.empty(batch, num_q_heads, splits, device=query.device, dtype=torch.float32)
        l_s = torch.empty_like(m)
        acc = torch.empty(batch, num_q_heads, splits, head_dim, device=query.device,
                          dtype=torch.float32)
    else:
        m = l_s = acc = out  # not touched without SPLIT
    _paged_decode_kernel[(batch, num_kv_heads, splits)](
        query, k_cache, v_cache, block_tables, context_lens, out, m, l_s, acc,
        float(scale) * _LOG2E, split_len, window,
        *query.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        *out.stride(),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        HEAD_DIM_PAD=head_dim_pad, BLOCK_SIZE=block_size, BLOCK_N=block_n,
        NATIVE_DOT=native_dot(query, k_cache), SPLIT=splits > 1,
    )
    if splits > 1:
        _combine_splits_kernel[(batch, num_q_heads)](
            m, l_s, acc, context_lens, out, split_len, splits, window, *out.stride(),
            HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, MAX_SPLITS=MAX_SPLITS,
        )
