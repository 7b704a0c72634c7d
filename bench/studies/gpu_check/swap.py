"""Step `swap`: the bulk swap-out (`kvcache.swap.BulkSwapper`: one gather, one transfer into
pinned host memory, one scatter) against block-by-block copies, on the device, through
`bench.studies.swap_bench.measure`. A measurement: it FAILs only if the host copy is not pinned."""

from __future__ import annotations

import argparse

import torch

from bench.studies.gpu_check.step import (Outcome, Step, add_device_argument, int_list,
                                          markdown_table, release_device_memory, require)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device_argument(parser)
    parser.add_argument("--blocks", type=int_list, default="64,256,1024",
                        help="blocks per swap, comma-separated (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=5)


def resolve(args: argparse.Namespace) -> str:
    require("bench.studies.swap_bench:measure", "bench.studies.swap_bench:SHAPES",
            "kvcache.swap:BulkSwapper")
    return "bench.studies.swap_bench and kvcache.swap import"


def host_is_pinned(device: torch.device) -> bool:
    from kvcache.swap import BulkSwapper

    return BulkSwapper(torch.zeros(2, 4, device=device), 1).host_cache.is_pinned()


def run(args: argparse.Namespace) -> Outcome:
    from bench.studies.swap_bench import SHAPES, measure

    device = torch.device(args.device)
    pinned = host_is_pinned(device)
    rows = []
    for model in SHAPES:
        for n in args.blocks:
            row = measure(model, n, device, args.repeat)
            row["bulk_gbs"] = row["mib"] * 2**20 / (row["bulk_ms"] / 1e3) / 1e9
            row["per_block_gbs"] = row["mib"] * 2**20 / (row["per_block_ms"] / 1e3) / 1e9
            print(row, flush=True)
            rows.append(row)
            release_device_memory()
    big = max(rows, key=lambda r: r["mib"])
    summary = (f"{big['model']}, {big['blocks']} blocks ({big['mib']:.0f} MiB): bulk "
               f"{big['bulk_gbs']:.1f} GB/s vs block-by-block {big['per_block_gbs']:.1f} GB/s "
               f"({big['ratio']:.2f}x); bulk faster in {sum(r['ratio'] > 1 for r in rows)}/"
               f"{len(rows)}; host memory {'pinned' if pinned else 'NOT pinned'}")
    table = markdown_table(
        ("model", "blocks", "MiB", "bulk ms", "bulk GB/s", "block-by-block ms",
         "block-by-block GB/s", "ratio"),
        [(r["model"], r["blocks"], f"{r['mib']:.0f}", f"{r['bulk_ms']:.2f}",
          f"{r['bulk_gbs']:.1f}", f"{r['per_block_ms']:.2f}", f"{r['per_block_gbs']:.1f}",
          f"{r['ratio']:.2f}x") for r in rows])
    status = "ok" if pinned or device.type != "cuda" else "FAIL"
    return Outcome(status, summary, {"device": str(device), "pinned": pinned, "rows": rows},
                   "Swap-out (device to host) of scattered blocks.\n\n" + table)


STEP = Step(__doc__, add_arguments, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
