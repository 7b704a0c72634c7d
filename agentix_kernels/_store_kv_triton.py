"""Triton kernel of `agentix_kernels.store_kv.store_kvcache` (imported on first use: needs
triton)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kvcache_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_kcb, stride_kco, stride_kch, stride_kcd,
    stride_vcb, stride_vco, stride_vch, stride_vcd,
    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
):
    # One program per (token, kv head): copies one head_dim row of K and of V.
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    safe_slot = tl.maximum(slot, 0)
    block = safe_slot // BLOCK_SIZE
    offset = safe_slot % BLOCK_SIZE
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask = (offs_d < HEAD_DIM) & (slot >= 0)

    k = tl.load(key_ptr + token * stride_kt + head * stride_kh + offs_d * stride_kd, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + head * stride_vh + offs_d * stride_vd, mask=mask)
    k_dst = k_cache_ptr + block * stride_kcb + offset * stride_kco + head * stride_kch
    v_dst = v_cache_ptr + block * stride_vcb + offset * stride_vco + head * stride_vch
    tl.store(k_dst + offs_d * stride_kcd, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_dst + offs_d * stride_vcd, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def launch_store_kvcache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Launch one program per (token, kv head); arguments already validated by the caller."""
    num_tokens, num_kv_heads, head_dim = key.shape
    _store_kvcache_kernel[(num_tokens, num_kv_heads)](
        key, value, k_cache, v_cache, slot_mapping,
        *key.stride(), *value.stride(), *k_cache.stride(), *v_cache.stride(),
        BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
        HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
    )
