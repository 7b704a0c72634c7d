"""Offline throughput: Agentix against transformers `generate` (static batches of 8 and 32),
same ShareGPT-length requests, same model (SmolLM2-135M-Instruct), same dtype.

    python -m bench.studies.throughput [--num 64] [--max-output-tokens 256] [--max-num-seqs 64,128]
                                       [--repeats 3]

Each measurement runs in its own fresh process (so peak RSS is its own); the table reports
tokens/s, seconds, peak RSS, and the ratio of each run to the better transformers figure of
its repeat. The engine runs once per `--max-num-seqs` value, with `--kv-cache-gb-per-64-seqs`
of KV pool per 64 seats (a batch holds at most `--num` calls, so values above it change
nothing). With `--repeats N` the whole set runs N times, the engines first in even repeats
and transformers first in odd ones, so a machine that speeds up or slows down during the run
moves both sides alike over the repeats; the best-agentix ratio of every repeat is printed
with its min / median / max.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from bench.support.measure import run_in_subprocess
from bench.support.repeats import alternate, spread_text

Run = tuple[str, dict[str, Any]]


def _best_hf(runs: Sequence[Run]) -> float:
    """The fastest transformers run's tokens/s."""
    return max(r["tokens_per_s"] for name, r in runs if not name.startswith("agentix"))


def best_ratio(runs: Sequence[Run]) -> tuple[str, float]:
    """(label, ratio): the fastest agentix run of a repeat over its fastest transformers run,
    in tokens/s."""
    name, best = max(((n, r) for n, r in runs if n.startswith("agentix")),
                     key=lambda run: run[1]["tokens_per_s"])
    return name, best["tokens_per_s"] / _best_hf(runs)


def _table(runs: Sequence[Run], repeat: int) -> str:
    best_hf = _best_hf(runs)
    lines = ["| repeat | engine | tokens | seconds | tokens/s | peak RSS MiB | preemptions "
             "| vs best transformers |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in runs:
        lines.append(f"| {repeat} | {name} | {r['tokens']} | {r['seconds']:.1f} | "
                     f"{r['tokens_per_s']:.1f} | {r['peak_rss_mb']:.0f} | "
                     f"{r.get('preemptions', '-')} | {r['tokens_per_s'] / best_hf:.2f}x |")
    return "\n".join(lines)


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
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the whole set this many times, alternating which side "
                             "goes first")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: must be >= 1, got {args.repeats}")
    from transformers import AutoTokenizer

    from bench.sim.sharegpt import describe, sample_requests
    from engine.models.smollm2 import ensure_smollm2_dir

    model_dir = str(ensure_smollm2_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    requests = sample_requests(tokenizer, args.num, args.seed, args.max_prompt_tokens,
                               args.max_output_tokens)
    print(describe(requests))
    jobs: dict[str, tuple[str, dict[str, Any]]] = {}
    for seqs in (int(s) for s in args.max_num_seqs.split(",")):
        config = dict(dtype=args.dtype, max_num_seqs=seqs,
                      kv_cache_memory_gb=args.kv_cache_gb_per_64_seqs * seqs / 64)
        jobs[f"agentix, max_num_seqs {seqs}"] = (
            "bench.support.engine_run:run_agentix",
            dict(model_dir=model_dir, requests=requests, config=config))
    for batch in (int(b) for b in args.hf_batch_sizes.split(",")):
        jobs[f"transformers generate, batch {batch}"] = (
            "bench.support.hf_baseline:run_hf_generate",
            dict(model_dir=model_dir, requests=requests, batch_size=batch, dtype=args.dtype))
    agentix = [name for name in jobs if name.startswith("agentix")]
    hf = [name for name in jobs if not name.startswith("agentix")]
    ratios = []
    for repeat in range(args.repeats):
        ran = {name: run_in_subprocess(*jobs[name]) for name in alternate(repeat, agentix, hf)}
        runs = [(name, ran[name]) for name in jobs]
        print("\n" + _table(runs, repeat))
        name, ratio = best_ratio(runs)
        ratios.append(ratio)
        print(f"\nrepeat {repeat}: best agentix: {name}, {ratio:.2f}x the best transformers")
    print(f"\nbest agentix over best transformers, per repeat: {spread_text(ratios)}")


if __name__ == "__main__":
    main()
