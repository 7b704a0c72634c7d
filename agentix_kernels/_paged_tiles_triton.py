"""What the paged attention kernels share (imported on first use: needs triton): a tile of
K/V read through the block table, and the two products of the online softmax.

`native_dot` (host side) says whether tl.dot takes 16-bit inputs as they are (fp32
accumulation, tensor cores): only for fp16/bf16 caches on a real GPU, since the interpreter
computes 16-bit dots wrongly and fp32 inputs must avoid TF32; otherwise both products run as
fp32 IEEE dots.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def native_dot(query: torch.Tensor, k_cache: torch.Tensor) -> bool:
    interpreted = os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes")
    return (query.dtype in (torch.float16, torch.bfloat16) and k_cache.dtype == query.dtype
            and query.is_cuda and not interpreted)


@triton.jit
def load_kv_tile(k_ptr, v_ptr, block_tables_ptr, seq, kv_head, k_pos, n_mask, offs_d, d_mask,
                 stride_btb, stride_btn, stride_kb, stride_kt, stride_kh, stride_kd,
                 stride_vb, stride_vt, stride_vh, stride_vd, block_size):
    """K and V `[len(k_pos), HEAD_DIM_PAD]` of sequence `seq`'s positions `k_pos` (each from
    its cache block, looked up in the block table), zeros where `n_mask` or `d_mask` is off."""
    block = tl.load(block_tables_ptr + seq * stride_btb + (k_pos // block_size) * stride_btn,
                    mask=n_mask, other=0).to(tl.int64)
    in_block = (k_pos % block_size).to(tl.int64)
    kv_mask = n_mask[:, None] & d_mask[None, :]
    k = tl.load(k_ptr + block[:, None] * stride_kb + in_block[:, None] * stride_kt
                + kv_head * stride_kh + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + block[:, None] * stride_vb + in_block[:, None] * stride_vt
                + kv_head * stride_vh + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
    return k, v


@triton.jit
def qk_dot(q, k, NATIVE_DOT: tl.constexpr):
    """q @ k^T in fp32 (`q` already fp32 unless NATIVE_DOT). One return after an if/else:
    Triton compiles the code after a constexpr `if` that returned, so an early return would
    build the fp32 dot for 16-bit inputs and fail to compile on a GPU."""
    if NATIVE_DOT:
        s = tl.dot(q, tl.trans(k))
    else:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    return s


@triton.jit
def pv_dot(p, v, NATIVE_DOT: tl.constexpr):
    """p @ v in fp32 (`p` the fp32 softmax weights); one return, as in `qk_dot`."""
    if NATIVE_DOT:
        pv = tl.dot(p.to(v.dtype), v)
    else:
        pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
    return pv
