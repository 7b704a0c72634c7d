"""Whole-block gather/scatter along dim 0, for the bulk KV swap.

A block is everything after dim 0 of `src`/`dst` (for the KV cache: all layers, K and V of one
block), copied as a flat row of `src[0].numel()` elements; both tensors must be contiguous along
their non-leading dims and have the same dtype. `block_ids` is int64 [n].
    gather_blocks(src, block_ids, dst):  dst[i] = src[block_ids[i]]  for i < n
    scatter_blocks(src, block_ids, dst): dst[block_ids[i]] = src[i]  for i < n
Both write `dst` in place and return None; rows of `dst` not named are left untouched (a staging
buffer may have more than n rows). Bits are copied as they are (any dtype).
"""

from __future__ import annotations

import torch


def _check(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor,
           staging: torch.Tensor) -> None:
    """Validate; `staging` is the side indexed by 0..n-1 (dst for gather, src for scatter)."""
    if src.dim() < 1 or src.shape[1:] != dst.shape[1:]:
        raise ValueError(f"src and dst blocks differ: {tuple(src.shape)} vs {tuple(dst.shape)}")
    if src.dtype != dst.dtype:
        raise ValueError(f"src dtype {src.dtype} != dst dtype {dst.dtype}")
    if block_ids.dim() != 1:
        raise ValueError(f"block_ids must be 1-D, got {tuple(block_ids.shape)}")
    if block_ids.shape[0] > staging.shape[0]:
        raise ValueError(f"{block_ids.shape[0]} block ids but the staging side has only "
                         f"{staging.shape[0]} rows")


def gather_blocks_ref(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor) -> None:
    """Torch reference of `gather_blocks`: dst[i] = src[block_ids[i]]."""
    _check(src, block_ids, dst, staging=dst)
    ids = block_ids.to(device=src.device, dtype=torch.long)
    out = dst[: block_ids.shape[0]]
    if out.is_contiguous() and out.device == src.device and out.dtype == src.dtype:
        torch.index_select(src, 0, ids, out=out)  # straight into dst: one copy, no temporary
    else:
        out.copy_(src.index_select(0, ids))


def scatter_blocks_ref(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor) -> None:
    """Torch reference of `scatter_blocks`: dst[block_ids[i]] = src[i]."""
    _check(src, block_ids, dst, staging=src)
    n = block_ids.shape[0]
    dst.index_copy_(0, block_ids.to(device=dst.device, dtype=torch.long), src[:n].to(dst.device))


def _copy_rows(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor,
               gather: bool) -> None:
    if block_ids.shape[0] == 0 or src[0].numel() == 0:
        return
    if not (src[0].is_contiguous() and dst[0].is_contiguous()):
        raise ValueError("src and dst must be contiguous along their non-leading dims")
    from agentix_kernels._block_copy_triton import launch_copy_rows  # imports triton on first use

    launch_copy_rows(src, block_ids, dst, gather)


def gather_blocks(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor) -> None:
    """Triton `gather_blocks`: dst[i] = src[block_ids[i]] (contract in the module docstring).
    Tensors on CUDA, or on CPU under TRITON_INTERPRET=1."""
    _check(src, block_ids, dst, staging=dst)
    _copy_rows(src, block_ids, dst, gather=True)


def scatter_blocks(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor) -> None:
    """Triton `scatter_blocks`: dst[block_ids[i]] = src[i] (contract in the module docstring).
    Tensors on CUDA, or on CPU under TRITON_INTERPRET=1."""
    _check(src, block_ids, dst, staging=src)
    _copy_rows(src, block_ids, dst, gather=False)
