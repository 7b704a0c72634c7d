"""Transparent huge pages for a large host tensor: `madvise(MADV_HUGEPAGE)` on Linux.

A decode step reads each row's KV blocks, scattered over gigabytes of cache; on 4 KiB pages
nearly every block costs TLB misses. Where transparent huge pages are `madvise` only (a common
default), memory is backed by 2 MiB pages only if asked for before it is first touched. The
advice is a hint: it changes no byte, and where it cannot be given (another OS, THP off, a
small tensor) nothing happens.
"""

from __future__ import annotations

import ctypes
import sys

import torch

HUGE_PAGE_BYTES = 2 * 1024 * 1024
_MADV_HUGEPAGE = 14  # linux/mman.h


def advise_huge_pages(tensor: torch.Tensor) -> bool:
    """Ask Linux to back the whole 2 MiB pages inside `tensor`'s memory (a contiguous CPU
    tensor, best not yet written) with transparent huge pages. True when the kernel took
    the advice; False, changing nothing, where it cannot be given."""
    if not sys.platform.startswith("linux") or tensor.device.type != "cpu" \
            or not tensor.is_contiguous():
        return False
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first = -(-start // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    last = end // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if last <= first:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first),
                        _MADV_HUGEPAGE) == 0


def zeros_on_huge_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed contiguous CPU tensor whose memory was offered huge pages
    (`advise_huge_pages`) before it was first written."""
    tensor = torch.empty(shape, dtype=dtype)
    advise_huge_pages(tensor)
    return tensor.zero_()
