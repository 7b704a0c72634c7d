"""The native CPU `paged_decode_attention` (contract in `agentix_kernels.decode_attention`).

`supports(...)` says whether the native kernel takes these tensors: the library built, every
tensor on the CPU, query/K/V all float32 or all bfloat16, K and V with the same strides and
unit stride along head_dim. Anything else goes to the torch reference. The kernel reads the
caches in place, walks only the context's slots (the window's, with a window), computes in
float32 (a bfloat16 query is widened first, the output rounded back once) with its softmax
online, on torch's intra-op threads, and releases the GIL while it runs.
"""

from __future__ import annotations

import torch

from agentix_kernels.native.build import native_library

# The kernel's status for tables that do not fit the cache (KERNEL_BAD_TABLES in the C source).
_BAD_TABLES = 2
# The cache dtypes the kernel reads.
DTYPES = (torch.float32, torch.bfloat16)


def supports(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             block_tables: torch.Tensor, context_lens: torch.Tensor) -> bool:
    """Whether `paged_decode_attention` can run these tensors natively."""
    tensors = (query, k_cache, v_cache, block_tables, context_lens)
    return (all(t.device.type == "cpu" for t in tensors)
            and query.dtype == k_cache.dtype == v_cache.dtype and query.dtype in DTYPES
            and k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
            and native_library() is not None)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float, group: int, window: int = 0) -> torch.Tensor:
    """Natively; the caller validated shapes (`group` = query heads per kv head) and
    `supports(...)`. Raises ValueError, before reading the cache, when a context length is
    negative or longer than its table row, or a block id it reads is not a cache block;
    MemoryError when the kernel cannot allocate its scratch."""
    batch, heads, dim = query.shape
    wide = query.float().contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    lens = context_lens.to(torch.int32).contiguous()
    out = torch.empty_like(wide)
    if batch == 0:
        return out.to(query.dtype)
    status = native_library().paged_decode_attention_cpu(
        wide.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
        int(k_cache.dtype == torch.bfloat16), k_cache.shape[0],
        *k_cache.stride()[:3], tables.data_ptr(), tables.shape[1], tables.stride(0),
        lens.data_ptr(), batch, heads, heads // group, dim, k_cache.shape[1], scale, window,
        torch.get_num_threads(), out.data_ptr())
    if status == _BAD_TABLES:
        raise ValueError(f"block_tables/context_lens do not fit the cache: every context_len "
                         f"must be in [0, {tables.shape[1]} blocks x {k_cache.shape[1]}] and "
                         f"every block it reads in [0, {k_cache.shape[0]})")
    if status != 0:
        raise MemoryError("native paged_decode_attention could not allocate its scratch")
    return out.to(query.dtype)
