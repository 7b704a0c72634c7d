"""Step `decode-bandwidth`: the Triton paged decode attention's bandwidth as a fraction of a
device-to-device copy's.

Kernel GB/s = K + V bytes of every context token / kernel time (queries and outputs are
negligible); copy GB/s = 2 x bytes / time of `dst.copy_(src)` on a tensor of the same size
(read + write). Shapes are Llama-3.1-8B attention (32 query / 8 KV heads, head dim 128, bf16,
16-token blocks, block tables shuffled). The kernel's output is first checked against the
torch reference (max abs error <= TOLERANCE x max(1, max abs output)); a mismatch FAILs.
"""

from __future__ import annotations

import argparse

import torch

from bench.studies.gpu_check.step import (Outcome, Step, add_device_argument, markdown_table,
                                          release_device_memory, require)
from bench.studies.gpu_check.timing import median_seconds

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
DTYPE = torch.bfloat16
TOLERANCE = 2e-2
DEFAULT_SHAPES = "64x4096,256x1024,16x16384"


def shape_list(text: str) -> list[tuple[int, int]]:
    """'64x4096,256x1024' -> [(batch, context), ...]."""
    try:
        shapes = [tuple(int(n) for n in part.split("x")) for part in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) <= 0 for s in shapes):
        raise argparse.ArgumentTypeError(f"expected BATCHxCONTEXT[,...], got {text!r}")
    return shapes


def paged_inputs(batch: int, context: int, device: torch.device) -> tuple:
    """(query, k_cache, v_cache, block_tables, context_lens) with every context full length."""
    gen = torch.Generator(device=device).manual_seed(0)
    per_seq = -(-context // BLOCK_SIZE)
    num_blocks = batch * per_seq + 1  # block 0 is the null block
    kv = torch.randn(num_blocks, 2, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=gen, device=device,
                     dtype=DTYPE)
    order = torch.randperm(num_blocks - 1, generator=gen, device=device) + 1
    tables = order.view(batch, per_seq).to(torch.int32)
    lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    query = torch.randn(batch, Q_HEADS, HEAD_DIM, generator=gen, device=device, dtype=DTYPE)
    return query, kv[:, 0], kv[:, 1], tables, lens


def measure(batch: int, context: int, device: torch.device, iters: int) -> dict:
    from agentix_kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref

    inputs = paged_inputs(batch, context, device)
    scale = HEAD_DIM ** -0.5
    ref = paged_decode_attention_ref(*inputs, scale).float()
    error = (paged_decode_attention(*inputs, scale).float() - ref).abs().max().item()
    bound = TOLERANCE * max(1.0, ref.abs().max().item())
    kv_bytes = 2 * batch * context * KV_HEADS * HEAD_DIM * DTYPE.itemsize
    kernel_s = median_seconds(lambda: paged_decode_attention(*inputs, scale), device, iters)
    inputs = None   # free the cache before the copy buffers
    src = torch.empty(kv_bytes // DTYPE.itemsize, dtype=DTYPE, device=device)
    dst = torch.empty_like(src)
    copy_s = median_seconds(lambda: dst.copy_(src), device, iters)
    kernel_gbs, copy_gbs = kv_bytes / kernel_s / 1e9, 2 * kv_bytes / copy_s / 1e9
    return {"batch": batch, "context": context, "kv_mib": kv_bytes / 2**20,
            "max_abs_error": error, "correct": error <= bound, "kernel_ms": kernel_s * 1e3,
            "kernel_gbs": kernel_gbs, "copy_ms": copy_s * 1e3, "copy_gbs": copy_gbs,
            "fraction": kernel_gbs / copy_gbs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device_argument(parser)
    parser.add_argument("--shapes", type=shape_list, default=DEFAULT_SHAPES,
                        help="BATCHxCONTEXT,... (default %(default)s)")
    parser.add_argument("--iters", type=int, default=20)


def resolve(args: argparse.Namespace) -> str:
    require("agentix_kernels.decode_attention:paged_decode_attention",
            "agentix_kernels.decode_attention:paged_decode_attention_ref",
            "agentix_kernels._decode_attention_triton:launch_paged_decode")
    return "kernels.decode_attention and its Triton kernel import"


def run(args: argparse.Namespace) -> Outcome:
    device = torch.device(args.device)
    rows = []
    for batch, context in args.shapes:
        rows.append(measure(batch, context, device, args.iters))
        print(rows[-1], flush=True)
        release_device_memory()
    wrong = [r for r in rows if not r["correct"]]
    best = max(rows, key=lambda r: r["fraction"])
    summary = (f"best {100 * best['fraction']:.0f}% of copy ({best['kernel_gbs']:.0f} vs "
               f"{best['copy_gbs']:.0f} GB/s at {best['batch']}x{best['context']}); worst "
               f"{100 * min(r['fraction'] for r in rows):.0f}%")
    if wrong:
        summary = (f"kernel differs from the reference (max abs error "
                   f"{wrong[0]['max_abs_error']:.3g}); {summary}")
    table = markdown_table(
        ("batch x context", "K+V MiB", "max abs error", "kernel ms", "kernel GB/s", "copy GB/s",
         "fraction of copy"),
        [(f"{r['batch']}x{r['context']}", f"{r['kv_mib']:.0f}", f"{r['max_abs_error']:.2g}",
          f"{r['kernel_ms']:.3f}", f"{r['kernel_gbs']:.0f}", f"{r['copy_gbs']:.0f}",
          f"{100 * r['fraction']:.0f}%") for r in rows])
    return Outcome("FAIL" if wrong else "ok", summary, {"device": str(device), "rows": rows},
                   table)


STEP = Step(__doc__, add_arguments, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
