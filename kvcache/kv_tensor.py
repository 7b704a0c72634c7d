"""The engine's one block-major KV tensor: its shape, size and per-layer views."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kvcache.huge_pages import zeros_on_huge_pages


@dataclass(frozen=True)
class KVCacheSpec:
    """Shape of the KV cache: `num_blocks` blocks of `block_shape`, block 0 included."""

    num_blocks: int
    num_layers: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    def __post_init__(self) -> None:
        for name in ("num_blocks", "num_layers", "block_size", "num_kv_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not isinstance(self.dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch.dtype, got {self.dtype!r}")

    @property
    def block_shape(self) -> tuple[int, int, int, int, int]:
        """One block, contiguous across layers: (layers, K/V, block_size, kv_heads, head_dim)."""
        return (self.num_layers, 2, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def bytes_per_block(self) -> int:
        return math.prod(self.block_shape) * self.dtype.itemsize


def allocate_kv_cache(spec: KVCacheSpec, device: torch.device | str) -> torch.Tensor:
    """A zeroed `[num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]` tensor. On
    the CPU its memory is offered transparent huge pages before it is zeroed
    (`zeros_on_huge_pages`): the decode attention reads scattered blocks of it."""
    shape = (spec.num_blocks, *spec.block_shape)
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=spec.dtype, device=device)
    return zeros_on_huge_pages(shape, spec.dtype)


def layer_kv(kv_cache: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Strided K and V views of one layer, each `[num_blocks, block_size, kv_heads, head_dim]`.

    Writes through the views land in `kv_cache`.
    """
    if not 0 <= layer < kv_cache.shape[1]:
        raise ValueError(f"layer must be in [0, {kv_cache.shape[1]}), got {layer}")
    return kv_cache[:, layer, 0], kv_cache[:, layer, 1]
