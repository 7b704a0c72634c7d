"""Write new K/V rows into one layer's paged cache, by slot mapping.

Contract (both implementations):
    key, value:   [num_tokens, num_kv_heads, head_dim]
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], any strides (usually
                  non-contiguous views `kv_cache[:, layer, 0]` / `kv_cache[:, layer, 1]`)
    slot_mapping: int64 [num_tokens]; slot = block_id * block_size + offset_in_block.
                  A slot < 0 marks a padding token: nothing is written for it.
Writes k_cache/v_cache in place (cast to the cache dtype); returns None.
"""

from __future__ import annotations

import torch



def _check(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
           v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    if key.dim() != 3 or key.shape != value.shape:
        raise ValueError(f"key/value must both be [tokens, kv_heads, head_dim], got "
                         f"{tuple(key.shape)} and {tuple(value.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache/v_cache must both be [blocks, block_size, kv_heads, head_dim], "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    if tuple(k_cache.shape[2:]) != tuple(key.shape[1:]):
        raise ValueError(f"cache (kv_heads, head_dim) {tuple(k_cache.shape[2:])} do not match key "
                         f"{tuple(key.shape[1:])}")
    if slot_mapping.shape != (key.shape[0],):
        raise ValueError(f"slot_mapping must be [{key.shape[0]}], got {tuple(slot_mapping.shape)}")


def store_kvcache_ref(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Torch reference of `store_kvcache` (same contract)."""
    _check(key, value, k_cache, v_cache, slot_mapping)
    slots = slot_mapping.to(device=k_cache.device, dtype=torch.long)
    valid = slots >= 0
    if not bool(valid.all()):
        slots, key, value = slots[valid], key[valid], value[valid]
    block_size = k_cache.shape[1]
    blocks, offsets = slots // block_size, slots % block_size
    # Advanced-index assignment writes through the (non-contiguous) views in place.
    k_cache[blocks, offsets] = key.to(k_cache.dtype)
    v_cache[blocks, offsets] = value.to(v_cache.dtype)


def store_kvcache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Triton `store_kvcache` (contract in the module docstring); tensors on CUDA, or on CPU
    under TRITON_INTERPRET=1."""
    _check(key, value, k_cache, v_cache, slot_mapping)
    if key.shape[0] == 0:
        return
    from agentix_kernels._store_kv_triton import launch_store_kvcache  # imports triton on first use

    launch_store_kvcache(key, value, k_cache, v_cache, slot_mapping)
