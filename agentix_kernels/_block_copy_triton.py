"""Triton kernel of `agentix_kernels.block_copy` (imported on first use: needs triton)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 1024  # elements per program


@triton.jit
def _copy_rows_kernel(src_ptr, dst_ptr, ids_ptr, row_numel, stride_src, stride_dst,
                      chunks_per_row, GATHER: tl.constexpr, BLOCK: tl.constexpr):
    # One program per (listed block i, chunk of BLOCK elements of its row), on a 1-D grid.
    pid = tl.program_id(0).to(tl.int64)
    i = pid // chunks_per_row
    offs = (pid % chunks_per_row) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < row_numel
    block = tl.load(ids_ptr + i).to(tl.int64)
    if GATHER:
        src_row = block
        dst_row = i
    else:
        src_row = i
        dst_row = block
    x = tl.load(src_ptr + src_row * stride_src + offs, mask=mask)
    tl.store(dst_ptr + dst_row * stride_dst + offs, x, mask=mask)


def _same_size_int(dtype: torch.dtype) -> torch.dtype:
    """An integer dtype of the same width, to copy raw bits (dtype-agnostic, bf16-safe)."""
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


def launch_copy_rows(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor,
                     gather: bool) -> None:
    """gather: dst[i] = src[block_ids[i]]; scatter: dst[block_ids[i]] = src[i]. Arguments already
    validated (n > 0, rows contiguous)."""
    row_numel = src[0].numel()
    chunks = triton.cdiv(row_numel, _BLOCK)
    as_int = _same_size_int(src.dtype)
    _copy_rows_kernel[(block_ids.shape[0] * chunks,)](
        src.view(as_int), dst.view(as_int), block_ids, row_numel, src.stride(0), dst.stride(0),
        chunks, GATHER=gather, BLOCK=_BLOCK,
    )
