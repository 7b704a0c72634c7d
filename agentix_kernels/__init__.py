"""Kernels of the paged engine: the one dispatch point.

DESIGN.md's `kernels/`: the package is named `agentix_kernels` because transformers >= 5.25
depends on Hugging Face's own `kernels` package, which a top-level `kernels` here would shadow.

Each op runs its Triton kernel when all its tensors are on CUDA and its plain-torch reference
otherwise (CPU, or any mix of devices). Triton is optional: without it every op uses the
reference, so a CPU-only install works. One exception: float32 and bfloat16 decode
attention on the CPU runs a native C kernel (`agentix_kernels.native`, built on first use)
when the library can be built; `AGENTIX_NATIVE_CPU=0` turns it off.
Contracts (details in each module's docstring):

- `store_kvcache(key, value, k_cache, v_cache, slot_mapping) -> None`: writes key/value
  [tokens, kv_heads, head_dim] into the paged caches [blocks, block_size, kv_heads, head_dim] at
  int64 slots (block_id * block_size + offset); slot < 0 = padding, skipped.
- `paged_decode_attention(query, k_cache, v_cache, block_tables, context_lens, scale,
  step_cache=None, window=0) -> out`:
  query [batch, q_heads, head_dim] (each sequence's last token), int32 block_tables
  [batch, max_blocks] and context_lens [batch] (0 = padding row, zero output); out like query.
- `paged_prefill_attention(query, k_cache, v_cache, block_tables, query_start_loc, context_lens,
  scale, window=0) -> out`: query [total_tokens, q_heads, head_dim] = concatenated chunks, int32
  query_start_loc [batch + 1]; each chunk is the last q_len tokens of its context and attends
  causally to the whole cached context; out like query.
- `window` > 0 (both attentions): sliding-window attention, a query at position p attends
  keys p - window < k <= p only.
- `gather_blocks(src, block_ids, dst) -> None`: dst[i] = src[block_ids[i]].
- `scatter_blocks(src, block_ids, dst) -> None`: dst[block_ids[i]] = src[i].

GQA everywhere: query head h reads kv head h // (q_heads // kv_heads).
"""

from __future__ import annotations

import importlib.util

import torch

from agentix_kernels import block_copy, decode_attention, prefill_attention, store_kv
from agentix_kernels.native import decode_attention as native_decode_attention

# Whether triton is installed, found without importing it: importing `agentix_kernels` never imports
# triton (the Triton modules load on the first CUDA call), so TRITON_INTERPRET may still be set
# after `import agentix_kernels`.
HAS_TRITON: bool = importlib.util.find_spec("triton") is not None

__all__ = [
    "gather_blocks",
    "paged_decode_attention",
    "paged_prefill_attention",
    "scatter_blocks",
    "store_kvcache",
]


def _on_cuda(*tensors: torch.Tensor) -> bool:
    """True when the Triton kernel should run: triton is installed and every tensor is on CUDA."""
    return HAS_TRITON and all(t.is_cuda for t in tensors)


def store_kvcache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Write key/value rows into the paged caches at `slot_mapping` (slot < 0 skipped)."""
    if _on_cuda(key, value, k_cache, v_cache, slot_mapping):
        return store_kv.store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    return store_kv.store_kvcache_ref(key, value, k_cache, v_cache, slot_mapping)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float, step_cache: dict | None = None,
                           window: int = 0) -> torch.Tensor:
    """Attention of each sequence's last token over its paged context (its last `window` keys
    when `window` > 0); returns [batch, q_heads, head_dim] in query's dtype (zeros for
    context_len 0). `step_cache`: a dict shared by one step's layers, where the reference
    keeps what does not change between them."""
    _check_window(window)
    args = (query, k_cache, v_cache, block_tables, context_lens)
    if _on_cuda(*args):
        return decode_attention.paged_decode_attention(*args, scale, window)
    if native_decode_attention.supports(*args):
        group = decode_attention.check_shapes(*args)
        return native_decode_attention.paged_decode_attention(*args, scale, group, window)
    return decode_attention.paged_decode_attention_ref(*args, scale, step_cache, window)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, query_start_loc: torch.Tensor,
                            context_lens: torch.Tensor, scale: float,
                            window: int = 0) -> torch.Tensor:
    """Causal attention of prefill chunks over their cached prefix (within `window` keys of
    each query when > 0); returns a tensor like query."""
    _check_window(window)
    args = (query, k_cache, v_cache, block_tables, query_start_loc, context_lens)
    if _on_cuda(*args):
        return prefill_attention.paged_prefill_attention(*args, scale, window)
    return prefill_attention.paged_prefill_attention_ref(*args, scale, window)


def _check_window(window: int) -> None:
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0 (0: no window), got {window!r}")


def gather_blocks(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor) -> None:
    """dst[i] = src[block_ids[i]] for every i (whole blocks along dim 0), in place."""
    if _on_cuda(src, block_ids, dst):
        return block_copy.gather_blocks(src, block_ids, dst)
    return block_copy.gather_blocks_ref(src, block_ids, dst)


def scatter_blocks(src: torch.Tensor, block_ids: torch.Tensor, dst: torch.Tensor) -> None:
    """dst[block_ids[i]] = src[i] for every i (whole blocks along dim 0), in place."""
    if _on_cuda(src, block_ids, dst):
        return block_copy.scatter_blocks(src, block_ids, dst)
    return block_copy.scatter_blocks_ref(src, block_ids, dst)
