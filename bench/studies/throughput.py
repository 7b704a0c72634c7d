"""Offline throughput: Agentix against transformers `generate` (static batches of 8 and 32),
same ShareGPT-length requests, same model (SmolLM2-135M-Instruct), same dtype, one run.

    python -m bench.studies.throughput [--num 64] [--max-output-tokens 256] [--max-num-seqs 64,128]

Each measurement runs in its own fresh process (so peak RSS is its own); the table reports
tokens/s, seconds, peak RSS, and the ratio of each run to the better transformers figure.
The engine runs once per `--max-num-seqs` value, with `--kv-cache-gb-per-64-seqs` of KV pool
per 64 seats (a batch holds at most `--num` calls, so values above it change nothing).
"""

from __future__ import annotations

import argparse
from typing import Sequence

from bench.support.measure import run_in_subprocess


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument("--max-output-tokens", type=int, default=256)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-num-seqs", default="64", help="comma-separated, one run each")
    parser.add_argument("--kv-cache-gb-per-64-seqs", type=float, default=1.2)
    parser.add_argument("--hf-batch-sizes", default="8,32")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from bench.sim.sharegpt import describe, sample_requests
    from engine.models.smollm2 import ensure_smollm2_dir

    model_dir = str(ensure_smollm2_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    requests = sample_requests(tokenizer, args.num, args.seed, args.max_prompt_tokens,
                               args.max_output_tokens)
    print(describe(requests))
    rows = []
    for seqs in (int(s) for s in args.max_num_seqs.split(",")):
        config = dict(dtype=args.dtype, max_num_seqs=seqs,
                      kv_cache_memory_gb=args.kv_cache_gb_per_64_seqs * seqs / 64)
        rows.append((f"agentix, max_num_seqs {seqs}", run_in_subprocess(
            "bench.support.engine_run:run_agentix",
            dict(model_dir=model_dir, requests=requests, config=config))))
    hf_rows = [(f"transformers generate, batch {batch}", run_in_subprocess(
        "bench.support.hf_baseline:run_hf_generate",
        dict(model_dir=model_dir, requests=requests, batch_size=batch, dtype=args.dtype)))
        for batch in (int(b) for b in args.hf_batch_sizes.split(","))]
    best_hf = max(r["tokens_per_s"] for _, r in hf_rows)
    print("\n| engine | tokens | seconds | tokens/s | peak RSS MiB | preemptions "
          "| vs best transformers |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows + hf_rows:
        print(f"| {name} | {r['tokens']} | {r['seconds']:.1f} | {r['tokens_per_s']:.1f} | "
              f"{r['peak_rss_mb']:.0f} | {r.get('preemptions', '-')} | "
              f"{r['tokens_per_s'] / best_hf:.2f}x |")
    name, best = max(rows, key=lambda row: row[1]["tokens_per_s"])
    print(f"\nbest agentix: {name}, {best['tokens_per_s'] / best_hf:.2f}x the best transformers")


if __name__ == "__main__":
    main()
