"""Decode attention alone, on the engine's KV layout: the time of one decode step's attention
over every layer of SmolLM2-135M (30 layers, 9 query heads over 3 KV heads, head size 64,
16-token blocks, float32), without the rest of the model.

    python -m bench.studies.attention_speed [--batch 64] [--min-context 75]
        [--max-context 330] [--steps 15] [--threads 2] [--save OUT.pt] [--against OUT.pt]

Each of `--batch` rows gets a context drawn uniformly from [min, max] (seed 0) and blocks of
its own, scattered over one `[blocks, layers, 2, block_size, kv_heads, head_dim]` cache of
random values (kvcache/kv_tensor.py), so a row's next block is as far away as in the engine.
Runs one warm-up step, then `--steps` timed steps of `agentix_kernels.paged_decode_attention`
over all layers. Prints one JSON line: which path ran (`native`: the C kernel; `reference`:
the torch fallback), the median and fastest step in ms, and the K and V bytes the contexts
hold over the median step (GB/s). `--save` writes the last step's outputs, `--against` compares
them bit for bit with a file another checkout saved (`identical`): a kernel change that must
not change a result is checked this way before it is timed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Sequence

import torch

import agentix_kernels as kernels
from agentix_kernels.native import decode_attention as native_decode_attention
from kvcache.kv_tensor import KVCacheSpec, allocate_kv_cache, layer_kv

LAYERS, HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 30, 9, 3, 64, 16
MAX_BATCH, MAX_CONTEXT, MAX_STEPS = 1024, 32768, 1000
MAX_CACHE_GIB = 16  # the cache the longest contexts could need must fit this


def _spec(num_blocks: int) -> KVCacheSpec:
    """The study's cache of `num_blocks` blocks (SmolLM2-135M's shape, float32)."""
    return KVCacheSpec(num_blocks, LAYERS, BLOCK_SIZE, KV_HEADS, HEAD_DIM, torch.float32)


def _check(args: argparse.Namespace) -> None:
    """ValueError naming the first argument out of its range."""
    for name, low, high in (("batch", 1, MAX_BATCH), ("min_context", 1, MAX_CONTEXT),
                            ("max_context", 1, MAX_CONTEXT), ("steps", 1, MAX_STEPS),
                            ("threads", 1, 256)):
        value = getattr(args, name)
        if not low <= value <= high:
            raise ValueError(f"--{name.replace('_', '-')} must be in [{low}, {high}], "
                             f"got {value}")
    if args.min_context > args.max_context:
        raise ValueError(f"--min-context ({args.min_context}) exceeds --max-context "
                         f"({args.max_context})")
    blocks = args.batch * -(-args.max_context // BLOCK_SIZE)
    cache_gib = blocks * _spec(1).bytes_per_block / 2 ** 30
    if cache_gib > MAX_CACHE_GIB:
        raise ValueError(f"--batch {args.batch} x --max-context {args.max_context} may need a "
                         f"{cache_gib:.1f} GiB cache, over {MAX_CACHE_GIB} GiB")
    if args.against is not None and not args.against.is_file():
        raise ValueError(f"--against: no file {args.against}")


def measure(batch: int, min_context: int, max_context: int, steps: int
            ) -> tuple[dict, torch.Tensor]:
    """(figures, the last step's outputs [layers, batch, heads, head_dim])."""
    rng = random.Random(0)
    generator = torch.Generator().manual_seed(0)
    lens = [rng.randint(min_context, max_context) for _ in range(batch)]
    num_blocks = [-(-n // BLOCK_SIZE) for n in lens]
    spec = _spec(sum(num_blocks) + 1)
    cache = allocate_kv_cache(spec, "cpu")
    cache.normal_(generator=generator)
    block_ids = list(range(1, spec.num_blocks))
    rng.shuffle(block_ids)
    tables = torch.zeros(batch, max(num_blocks), dtype=torch.int32)
    taken = 0
    for row, n in enumerate(num_blocks):
        tables[row, :n] = torch.tensor(block_ids[taken:taken + n], dtype=torch.int32)
        taken += n
    context_lens = torch.tensor(lens, dtype=torch.int32)
    query = torch.randn(LAYERS, batch, HEADS, HEAD_DIM, generator=generator)
    layers = [layer_kv(cache, layer) for layer in range(LAYERS)]
    scale = HEAD_DIM ** -0.5

    def step() -> torch.Tensor:
        return torch.stack([kernels.paged_decode_attention(query[layer], k, v, tables,
                                                           context_lens, scale)
                            for layer, (k, v) in enumerate(layers)])

    k0, v0 = layers[0]
    path = "native" if native_decode_attention.supports(query[0], k0, v0, tables,
                                                        context_lens) else "reference"
    out = step()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        out = step()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    kv_bytes = sum(lens) * spec.bytes_per_block // BLOCK_SIZE
    return {"path": path, "batch": batch, "min_context": min_context,
            "max_context": max_context, "steps": steps, "median_ms": median * 1e3,
            "fastest_ms": min(seconds) * 1e3, "kv_bytes": kv_bytes,
            "gb_per_s": kv_bytes / median / 1e9}, out


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.attention_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--min-context", type=int, default=75)
    parser.add_argument("--max-context", type=int, default=330)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--save", type=Path, help="write the last step's outputs here")
    parser.add_argument("--against", type=Path,
                        help="compare the outputs bit for bit with this saved file")
    args = parser.parse_args(argv)
    try:
        _check(args)
    except ValueError as exc:
        parser.error(str(exc))
    torch.set_num_threads(args.threads)
    figures, out = measure(args.batch, args.min_context, args.max_context, args.steps)
    if args.save is not None:
        torch.save(out, args.save)
    if args.against is not None:
        figures["identical"] = bool(torch.equal(out, torch.load(args.against)))
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
