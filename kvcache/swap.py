"""Bulk KV swapping: one gather, one host<->device transfer and one scatter per batch."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

import agentix_kernels as kernels
from kvcache.huge_pages import zeros_on_huge_pages


class BulkSwapper:
    """Owns the host copy of swapped blocks, `[num_host_blocks, *block_shape]` on CPU (pinned
    for a CUDA cache, on huge pages for a CPU one).

    Copies the blocks named by `KVCacheManager.swap_out` / `swap_in` pairs. Each non-empty
    batch gathers its source blocks into one contiguous staging tensor, moves it in ONE
    transfer (on CUDA: pinned host memory, a side stream, non_blocking) and scatters it to
    the destination ids. Both methods return only once the copy is complete, so the source
    blocks may be overwritten and the destination blocks read right after the call.
    """

    def __init__(self, kv_cache: torch.Tensor, num_host_blocks: int) -> None:
        if num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {num_host_blocks}")
        self.kv_cache = kv_cache
        self._on_cuda = kv_cache.is_cuda
        shape = (num_host_blocks, *kv_cache.shape[1:])
        self.host_cache = torch.zeros(shape, dtype=kv_cache.dtype, pin_memory=True) \
            if self._on_cuda else zeros_on_huge_pages(shape, kv_cache.dtype)
        self._stream = torch.cuda.Stream(device=kv_cache.device) if self._on_cuda else None
        self._staging = self.host_cache[:0]  # reusable host staging (pinned on CUDA)
        self.num_copies = 0
        self.num_blocks_out = 0
        self.num_blocks_in = 0

    def swap_out(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Copy device block `d` into host block `h` for each `(d, h)`; empty: no-op."""
        if not pairs:
            return
        device_ids, host_ids = self._split(pairs, self.kv_cache, self.host_cache)
        with self._on_side_stream():
            staging = self._host_buffer(len(pairs)) if not self._on_cuda else torch.empty(
                (len(pairs), *self.kv_cache.shape[1:]), dtype=self.kv_cache.dtype,
                device=self.kv_cache.device,
            )
            kernels.gather_blocks(self.kv_cache, self._ids(device_ids, self.kv_cache), staging)
            host_staging = staging
            if self._on_cuda:
                host_staging = self._host_buffer(len(pairs))
                host_staging.copy_(staging, non_blocking=True)
        self._wait()
        kernels.scatter_blocks(host_staging, self._ids(host_ids, self.host_cache), self.host_cache)
        self.num_copies += 1
        self.num_blocks_out += len(pairs)

    def swap_in(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Copy host block `h` into device block `d` for each `(h, d)`; empty: no-op."""
        if not pairs:
            return
        host_ids, device_ids = self._split(pairs, self.host_cache, self.kv_cache)
        host_staging = self._host_buffer(len(pairs))
        kernels.gather_blocks(self.host_cache, self._ids(host_ids, self.host_cache), host_staging)
        with self._on_side_stream():
            staging = host_staging.to(self.kv_cache.device, non_blocking=True)
            kernels.scatter_blocks(staging, self._ids(device_ids, self.kv_cache), self.kv_cache)
        self._wait()
        self.num_copies += 1
        self.num_blocks_in += len(pairs)

    def _on_side_stream(self) -> contextlib.AbstractContextManager:
        """Run on the side stream, after the work already queued on the current one."""
        if self._stream is None:
            return contextlib.nullcontext()
        self._stream.wait_stream(torch.cuda.current_stream(self.kv_cache.device))
        return torch.cuda.stream(self._stream)

    def _wait(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()

    def _host_buffer(self, n: int) -> torch.Tensor:
        """Host staging for `n` blocks: a view of one reused buffer (pinned on CUDA), grown on
        demand; safe since every swap finishes with it before returning."""
        if self._staging.shape[0] < n:
            self._staging = torch.empty((n, *self.host_cache.shape[1:]),
                                        dtype=self.host_cache.dtype, pin_memory=self._on_cuda)
        return self._staging[:n]

    @staticmethod
    def _split(
        pairs: Sequence[tuple[int, int]], src: torch.Tensor, dst: torch.Tensor
    ) -> tuple[list[int], list[int]]:
        """Source and destination ids of `pairs`, checked against the tensors' block counts;
        destinations must be distinct (a source may repeat, e.g. a shared prefix block)."""
        src_ids = [pair[0] for pair in pairs]
        dst_ids = [pair[1] for pair in pairs]
        for ids, tensor in ((src_ids, src), (dst_ids, dst)):
            bad = [i for i in ids if not 0 <= i < tensor.shape[0]]
            if bad:
                raise ValueError(f"pairs: block {bad[0]} out of range [0, {tensor.shape[0]})")
        if len(set(dst_ids)) != len(dst_ids):
            raise ValueError(f"pairs: destination blocks repeat: {dst_ids}")
        return src_ids, dst_ids

    @staticmethod
    def _ids(ids: list[int], like: torch.Tensor) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.int64, device=like.device)
