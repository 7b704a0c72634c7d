"""The one KVCacheSpec of an engine: the runner allocates it, the engine and the scheduler
size blocks and swaps by it."""

from __future__ import annotations

from dataclasses import replace

import torch

from engine.config import EngineConfig
from engine.models.args import ModelArgs
from kvcache.kv_tensor import KVCacheSpec


def kv_cache_spec(args: ModelArgs, config: EngineConfig) -> KVCacheSpec:
    """The KV cache of a model of `args` under `config`, on each tensor-parallel rank (all
    alike): the rank's KV heads (`args.num_kv_heads / tensor_parallel_size`, at least one: a
    head replicated), and `config.num_kv_blocks` blocks, or as many as
    `config.kv_cache_memory_gb` holds (at least 2)."""
    kv_heads = max(1, args.num_kv_heads // config.tensor_parallel_size)
    one_block = KVCacheSpec(num_blocks=1, num_layers=args.num_layers,
                            block_size=config.block_size, num_kv_heads=kv_heads,
                            head_dim=args.head_dim, dtype=getattr(torch, config.dtype))
    num_blocks = config.num_kv_blocks or max(
        2, int(config.kv_cache_memory_gb * 2**30) // one_block.bytes_per_block)
    return replace(one_block, num_blocks=num_blocks)
