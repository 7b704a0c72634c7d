"""Triton kernel of `kernels.decode_attention.paged_decode_attention` (imported on first use:
needs triton)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, context_lens_ptr, out_ptr,
    qk_scale,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_btb, stride_btn,
    stride_ob, stride_oh, stride_od,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # One program per (sequence, q head); walks the sequence's blocks one block per iteration
    # with an online softmax (base 2, scale folded into q). All math in fp32.
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    kv_head = head // GROUP
    context_len = tl.load(context_lens_ptr + seq).to(tl.int32)

    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_t = tl.arange(0, BLOCK_SIZE)
    d_mask = offs_d < HEAD_DIM
    q = tl.load(q_ptr + seq * stride_qb + head * stride_qh + offs_d * stride_qd, mask=d_mask,
                other=0.0).to(tl.float32) * qk_scale

    m_i = tl.full([1], float("-inf"), tl.float32)
    l_i = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DIM_PAD], tl.float32)
    k_base = k_ptr + kv_head * stride_kh + offs_t[:, None] * stride_kt + offs_d[None, :] * stride_kd
    v_base = v_ptr + kv_head * stride_vh + offs_t[:, None] * stride_vt + offs_d[None, :] * stride_vd
    num_blocks = tl.cdiv(context_len, BLOCK_SIZE)
    for j in range(0, num_blocks):
        block = tl.load(block_tables_ptr + seq * stride_btb + j * stride_btn).to(tl.int64)
        t_mask = (j * BLOCK_SIZE + offs_t) < context_len
        mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(k_base + block * stride_kb, mask=mask, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1)
        s = tl.where(t_mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp2(s - m_new)
        alpha = tl.exp2(m_i - m_new)
        v = tl.load(v_base + block * stride_vb, mask=mask, other=0.0).to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)  # context 0: acc is 0, out is 0
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + offs_d * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=d_mask)


def launch_paged_decode(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                        group: int, out: torch.Tensor) -> None:
    """Launch one program per (sequence, q head), writing `out`; arguments already validated."""
    batch, num_q_heads, head_dim = query.shape
    _paged_decode_kernel[(batch, num_q_heads)](
        query, k_cache, v_cache, block_tables, context_lens, out,
        float(scale) * _LOG2E,
        *query.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        *out.stride(),
        GROUP=group, HEAD_DIM=head_dim, HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=k_cache.shape[1],
    )
