"""Swap microbenchmark: the bulk swap (one gather into a staging buffer, one transfer, one
scatter) against block-by-block copies of the same blocks, on real KV tensors.

    python -m bench.studies.swap_bench [--device cpu|cuda] [--blocks 64,256] [--repeat 5]

On CPU both sides are host memory copies, so the ratio shows the per-copy overhead the
bulk path removes; on CUDA the block-by-block side pays one small PCIe transfer per block.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Sequence

import torch

from kvcache.kv_tensor import KVCacheSpec, allocate_kv_cache
from kvcache.swap import BulkSwapper

SHAPES = {  # layers, kv heads, head dim, dtype: one 16-token block of each model
    "smollm2-135m": (30, 3, 64, torch.float32),
    "llama-3.1-8b": (32, 8, 128, torch.bfloat16),
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(model: str, num_blocks: int, device: torch.device, repeat: int) -> dict:
    layers, kv_heads, head_dim, dtype = SHAPES[model]
    spec = KVCacheSpec(num_blocks=num_blocks * 2 + 1, num_layers=layers, block_size=16,
                       num_kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)
    kv = allocate_kv_cache(spec, device)
    kv.normal_() if dtype.is_floating_point else None
    swapper = BulkSwapper(kv, num_blocks)
    device_blocks = list(range(1, 2 * num_blocks + 1, 2))  # scattered, every other block
    pairs = list(zip(device_blocks, range(num_blocks)))
    host = swapper.host_cache

    def bulk() -> None:
        swapper.swap_out(pairs)

    def per_block() -> None:
        for device_block, host_block in pairs:
            host[host_block].copy_(kv[device_block])
        _sync(device)

    times = {}
    for name, fn in (("bulk", bulk), ("per_block", per_block)):
        fn()
        samples = []
        for _ in range(repeat):
            _sync(device)
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        times[name] = statistics.median(samples)
    mib = num_blocks * spec.bytes_per_block / 2**20
    return {"model": model, "blocks": num_blocks, "mib": mib, "bulk_ms": times["bulk"] * 1e3,
            "per_block_ms": times["per_block"] * 1e3,
            "ratio": times["per_block"] / times["bulk"]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--blocks", default="64,256")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"device: {device}")
    print("| model | blocks | MiB | bulk ms | block-by-block ms | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model in SHAPES:
        for n in (int(b) for b in args.blocks.split(",")):
            r = measure(model, n, device, args.repeat)
            print(f"| {r['model']} | {r['blocks']} | {r['mib']:.0f} | {r['bulk_ms']:.2f} | "
                  f"{r['per_block_ms']:.2f} | {r['ratio']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
