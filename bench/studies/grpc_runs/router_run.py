"""Two real replicas behind the router on this machine, driven in real time by the gRPC run's
client: placement `cutoff` against `round_robin` (`python -m bench.studies.grpc_runs.router_run`).

For each placement a fresh `agentix serve --replicas 2 --placement P` (a subprocess: the router and
two replica processes, ATLAS, SmolLM2 on the CPU, one torch thread each) serves the scaled-down
mixed trace of `bench.studies.grpc_runs.grpc_run` (with its tool delays), played by
`bench.studies.grpc_runs.grpc_run.drive`. Lengths are divided by `--scale`, so the `cutoff` rule's
cutoff is too (2,048 / scale tokens): the rule sees the same calls as long or short as at full size.
Reported per placement: the program-level normalized latency (mean, P95) and the cache-hit rate (1 -
prefill computed / prompt tokens, from every call's usage).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.cli import add_real_run_arguments, real_run_setup
from bench.sim.metrics import compute_metrics
from bench.studies.grpc_runs.grpc_run import check_tokens, drive, with_tool_delays

FULL_SIZE_CUTOFF = 2048
READY_TIMEOUT_S = 300


def serve(model_dir: str, placement: str, cutoff: int, fields: dict[str, Any],
          threads: int) -> tuple[subprocess.Popen, str]:
    """Start `agentix serve --replicas 2` and return it with the router's address."""
    command = [sys.executable, "-m", "server.cli", "serve", "--replicas", "2",
               "--placement", placement, "--cutoff", str(cutoff), "--model", model_dir,
               "--port", "0", "--policy", "atlas", "--max-num-seqs",
               str(fields["max_num_seqs"]), "--num-kv-blocks", str(fields["num_kv_blocks"]),
               "--num-host-blocks", str(fields["num_host_blocks"]),
               "--set", f"block_size={fields['block_size']}",
               "--set", f"max_num_batched_tokens={fields['max_num_batched_tokens']}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    for line in process.stdout:
        if line.startswith("agentix serving on "):
            return process, line.split()[-1]
    process.wait(READY_TIMEOUT_S)
    raise RuntimeError(f"agentix serve --replicas 2 exited ({process.returncode}) unready")


def run_placement(trace, placement: str, cutoff: int, model_dir: str, fields: dict[str, Any],
                  threads: int, vocab: int) -> dict[str, Any]:
    process, address = serve(model_dir, placement, cutoff, fields, threads)
    try:
        results, prefill, _ = asyncio.run(drive(address, trace, vocab))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    check_tokens(trace, results)
    prompt = sum(c.prompt_len for p in trace.programs for c in p.calls)
    metrics = compute_metrics(results)
    return {**metrics.to_dict(), "prefill_tokens_computed": prefill, "prompt_tokens": prompt,
            "cache_hit_rate": 1 - prefill / prompt}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_real_run_arguments(parser, programs=36, rate=0.75, policies=["atlas"])
    parser.add_argument("--placements", default="cutoff,round_robin",
                        type=lambda s: s.split(","))
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    trace, fields = real_run_setup(args)
    trace = with_tool_delays(trace, args.seed)
    cutoff = max(1, round(FULL_SIZE_CUTOFF / args.scale))
    vocab = json.loads((Path(args.model_dir) / "config.json").read_text())["vocab_size"]
    figures = {}
    for placement in args.placements:
        figures[placement] = run_placement(trace, placement, cutoff, args.model_dir, fields,
                                           args.threads, vocab)
        f = figures[placement]
        print(f"{placement:>12}: mean {f['mean_norm_latency']:.3f} s/token, P95 "
              f"{f['p95_norm_latency']:.3f}, cache hit {f['cache_hit_rate']:.1%} "
              f"({f['prefill_tokens_computed']} of {f['prompt_tokens']} prompt tokens "
              f"computed)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"cutoff": cutoff, "figures": figures},
                                              indent=1) + "\n")


if __name__ == "__main__":
    main()
