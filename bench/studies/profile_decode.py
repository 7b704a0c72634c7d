"""Where one SmolLM2-135M decode step spends its time on CPU (fp32, 2 torch threads by default).

    python -m bench.studies.profile_decode [--batch 64,128] [--min-context 200] [--max-context 600]
                                           [--plain-linears] [--dtype bfloat16]

For each batch size: a zeroed paged KV cache, one decode token per row with a context drawn
uniformly from [min, max] (seed 0, every row in its own blocks) and `--steps` decode steps
(`forward` + `logits`; weights and cache in `--dtype`), the model's linears packed as the
engine packs them (`engine.models.cpu_linear`; `--plain-linears`: `F.linear`, as before). Prints the median step
time without the profiler, then, of `--steps` profiled steps, the one of median wall time split
by torch.profiler self CPU time into decode attention (all ops inside
`kernels.paged_decode_attention`), KV store (inside `kernels.store_kvcache`), the LM head
(inside `model.logits`), the layers' matmuls (ops under `aten::linear`/`matmul`/`mm`/`addmm`
or oneDNN's `mkldnn::_linear_pointwise`), small ops (every other op) and the rest (wall time
less all op time: Python, and the profiler's cost).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import agentix_kernels as kernels
from engine.loader import load_model, read_model_dir
from engine.models.attention import AttentionMetadata
from engine.models.cpu_linear import pack_linears
from engine.models.llama import LlamaForCausalLM
from kvcache.kv_tensor import KVCacheSpec, allocate_kv_cache, layer_kv

BLOCK_SIZE = 16
KERNEL_SCOPES = {"paged_decode_attention": "decode attention", "store_kvcache": "kv store"}
SCOPES = {**KERNEL_SCOPES, "lm_head": "lm head"}
MATMUL_OPS = ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm",
              "mkldnn::_linear_pointwise")
CATEGORIES = ("decode attention", "kv store", "lm head", "matmuls", "small ops")


def decode_batch(model: LlamaForCausalLM, batch: int, min_ctx: int, max_ctx: int,
                 dtype: torch.dtype = torch.float32) -> Callable[[], torch.Tensor]:
    """A closure running one decode step of `batch` rows over a fresh zeroed `dtype` cache."""
    args = model.args
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(min_ctx, max_ctx + 1, (batch,), generator=gen)
    blocks = (lens + BLOCK_SIZE - 1) // BLOCK_SIZE
    width = int(blocks.max())
    spec = KVCacheSpec(num_blocks=1 + int(blocks.sum()), num_layers=args.num_layers,
                       block_size=BLOCK_SIZE, num_kv_heads=args.num_kv_heads,
                       head_dim=args.head_dim, dtype=dtype)
    cache = allocate_kv_cache(spec, "cpu")
    kv_layers = [layer_kv(cache, i) for i in range(args.num_layers)]
    ids = torch.randperm(spec.num_blocks - 1, generator=gen) + 1
    tables = torch.zeros(batch, width, dtype=torch.int32)
    start = 0
    for row, n in enumerate(blocks.tolist()):
        tables[row, :n] = ids[start:start + n]
        start += n
    positions = lens - 1
    last_block = tables[torch.arange(batch), positions // BLOCK_SIZE].long()
    empty = torch.zeros(0, dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=last_block * BLOCK_SIZE + positions % BLOCK_SIZE,
        num_decode_tokens=batch, decode_block_tables=tables,
        decode_context_lens=lens.to(torch.int32), prefill_block_tables=empty.reshape(0, 0),
        prefill_query_start_loc=torch.zeros(1, dtype=torch.int32), prefill_context_lens=empty)
    input_ids = torch.randint(0, args.vocab_size, (batch,), generator=gen)

    def step() -> torch.Tensor:
        hidden = model(input_ids, positions, kv_layers, meta)
        with record_function("lm_head"):
            return model.logits(hidden)

    return step


@contextmanager
def scoped_kernels() -> Iterator[None]:
    """Wrap the kernels of `KERNEL_SCOPES` in profiler scopes of the same name."""
    patches = []
    for name in KERNEL_SCOPES:
        fn = getattr(kernels, name)

        def scoped(*a, _fn=fn, _name=name, **kw):
            with record_function(_name):
                return _fn(*a, **kw)

        patches.append(mock.patch.object(kernels, name, scoped))
    for p in patches:
        p.start()
    try:
        yield
    finally:
        for p in patches:
            p.stop()


def category(event) -> str:
    """The category of one profiler event: its innermost scope, else by its top-level op."""
    top, node = event, event
    while node is not None:
        if node.name in SCOPES:
            return SCOPES[node.name]
        top, node = node, node.cpu_parent
    return "matmuls" if top.name in MATMUL_OPS else "small ops"


def profile_step(step: Callable[[], torch.Tensor]) -> tuple[float, dict[str, float],
                                                           dict[str, float]]:
    """One profiled step: (wall ms, ms per category, ms per small op name)."""
    with scoped_kernels(), profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        step()
        wall = (time.perf_counter() - start) * 1e3
    per_cat = dict.fromkeys(CATEGORIES, 0.0)
    small: dict[str, float] = {}
    for ev in prof.events():
        ms = ev.self_cpu_time_total / 1e3
        cat = category(ev)
        per_cat[cat] += ms
        if cat == "small ops":
            small[ev.name] = small.get(ev.name, 0.0) + ms
    return wall, per_cat, small


def report(batch: int, step: Callable[[], torch.Tensor], steps: int) -> None:
    step()  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    profiled = sorted((profile_step(step) for _ in range(steps)), key=lambda p: p[0])
    wall, per_cat, small = profiled[len(profiled) // 2]
    rest = wall - sum(per_cat.values())
    print(f"\nbatch {batch}: median step {statistics.median(times):.1f} ms "
          f"({steps} steps, no profiler); median profiled step {wall:.1f} ms")
    print("| part | ms | share |\n| --- | --- | --- |")
    for name, ms in [*per_cat.items(), ("rest (Python, profiler)", rest)]:
        print(f"| {name} | {ms:.1f} | {ms / wall:.0%} |")
    top = sorted(small.items(), key=lambda kv: -kv[1])[:6]
    print("small ops, top: " + ", ".join(f"{n} {ms:.1f}" for n, ms in top))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", default="64,128")
    parser.add_argument("--min-context", type=int, default=200)
    parser.add_argument("--max-context", type=int, default=600)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plain-linears", action="store_true",
                        help="keep F.linear (MKL) instead of the engine's packed linears")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="the weights' and the KV cache's dtype")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    from engine.models.smollm2 import ensure_smollm2_dir

    torch.set_num_threads(args.threads)
    files = read_model_dir(ensure_smollm2_dir())
    model = load_model(files, args.max_context + 1, dtype, torch.device("cpu"))
    packed = 0 if args.plain_linears else pack_linears(model)
    print(f"SmolLM2-135M decode step, contexts uniform in [{args.min_context}, "
          f"{args.max_context}], block size {BLOCK_SIZE}, {args.dtype}, {args.threads} threads, "
          f"{packed} linears packed")
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch.split(",")):
            report(batch, decode_batch(model, batch, args.min_context, args.max_context,
                                       dtype), args.steps)


if __name__ == "__main__":
    main()
