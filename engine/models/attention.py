"""Paged attention for a flattened batch: decode tokens first, then prefill chunks.

The layer stores the step's new K/V into the paged cache by slot mapping, then attends over
the cache: decode tokens (one per call) through the paged decode kernel, prefill chunks (each
the last `q_len` tokens of its call's context) through the chunked-prefill kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import agentix_kernels as kernels


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step batch layout shared by all layers.

    Tokens `[0, num_decode_tokens)` are decodes (one per call), the rest prefill chunks.
    `slot_mapping[t]` is where token t's K/V go (-1 for none). Context lengths count the
    step's own tokens, which are stored before attention runs. `step_cache` starts empty
    and lives for the step: kernels keep there what all layers share (`kernels`).
    """

    slot_mapping: torch.Tensor
    num_decode_tokens: int
    decode_block_tables: torch.Tensor
    decode_context_lens: torch.Tensor
    prefill_block_tables: torch.Tensor
    prefill_query_start_loc: torch.Tensor
    prefill_context_lens: torch.Tensor
    step_cache: dict = field(default_factory=dict, compare=False, repr=False)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float, window: int = 0) -> torch.Tensor:
    """q `[T, Hq, D]`, k/v `[T, Hkv, D]` -> `[T, Hq, D]`; writes k/v into the cache views.
    `window` > 0: sliding-window attention (a token at position p sees keys p - window < k
    <= p only)."""
    kernels.store_kvcache(k, v, k_cache, v_cache, meta.slot_mapping)
    nd = meta.num_decode_tokens
    if nd == q.shape[0]:
        return kernels.paged_decode_attention(
            q, k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, scale,
            meta.step_cache, window)
    if nd == 0:
        return kernels.paged_prefill_attention(
            q, k_cache, v_cache, meta.prefill_block_tables, meta.prefill_query_start_loc,
            meta.prefill_context_lens, scale, window)
    out = torch.empty_like(q)
    out[:nd] = kernels.paged_decode_attention(
        q[:nd], k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, scale,
        meta.step_cache, window)
    out[nd:] = kernels.paged_prefill_attention(
        q[nd:], k_cache, v_cache, meta.prefill_block_tables, meta.prefill_query_start_loc,
        meta.prefill_context_lens, scale, window)
    return out
