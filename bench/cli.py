"""`agentix bench ...`: benchmark commands. `agentix bench sim` replays a generated workload
through the engine with the simulated executor and prints program-level metrics; `agentix bench
sweep` runs several policies over several arrival rates and reports each policy's capacity."""

from __future__ import annotations

import argparse
import importlib
import json

from bench.cost_model import GPU_PRESETS, MODEL_PRESETS
from bench.metrics import compute_metrics
from bench.simulate import BASELINES

WORKLOADS = ("sharegpt", "bfcl", "lats", "mixed")


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _sim(args: argparse.Namespace) -> None:
    from bench.simulate import simulate

    generator = importlib.import_module(f"bench.workloads.{args.workload}")
    trace = generator.generate(args.programs, args.seed, args.rate)
    result = simulate(trace, args.policy, preset=args.preset, model=args.model)
    metrics = compute_metrics(result.programs)
    summary = {
        "workload": args.workload, "policy": args.policy, "rate": args.rate,
        "programs": args.programs, "seed": args.seed, "preset": result.preset,
        "model": result.model, **metrics.to_dict(),
        "num_steps": result.num_steps, "num_preemptions": result.num_preemptions,
        "num_swap_outs": result.num_swap_outs, "swap_seconds": result.swap_seconds,
        "num_kv_blocks": result.num_kv_blocks, "sim_wall_seconds": result.wall_seconds,
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{args.workload} x {args.programs} programs at {args.rate}/s (seed {args.seed}), "
          f"policy {args.policy}, {result.model} on {result.preset} "
          f"({result.num_kv_blocks} KV blocks)")
    print(f"  programs completed   {metrics.programs_completed}")
    print(f"  norm latency (s/tok) mean {metrics.mean_norm_latency:.4f}  "
          f"P50 {metrics.p50_norm_latency:.4f}  P95 {metrics.p95_norm_latency:.4f}  "
          f"P99 {metrics.p99_norm_latency:.4f}")
    print(f"  throughput           {metrics.throughput_tokens_per_s:.1f} tokens/s "
          f"({metrics.generated_tokens} tokens, makespan {metrics.makespan_s:.1f} s)")
    print(f"  engine               {result.num_steps} steps, {result.num_preemptions} "
          f"preemptions, {result.num_swap_outs} swap-outs ({result.swap_seconds:.2f} s)")
    print(f"  simulated in         {result.wall_seconds:.1f} s")


def _policy_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"policies must be a comma-separated list of {sorted(BASELINES)}, got {text!r}")
    return list(dict.fromkeys(names))


def _rate_list(text: str) -> list[float]:
    try:
        rates = sorted({_positive_float(r) for r in text.split(",") if r.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"rates: {exc}") from None
    if not rates:
        raise argparse.ArgumentTypeError(f"rates must be a comma-separated list, got {text!r}")
    return rates


def _sweep(args: argparse.Namespace) -> None:
    import shlex
    import sys
    import time

    from bench.sweep import (TARGET_FACTOR, UNLOADED_RATE, capacity_table, latency_table,
                             latency_target, sweep, write_outputs)

    start = time.perf_counter()
    if args.target is not None:
        target, how = args.target, "given"
    else:
        target = latency_target(args.workload, args.preset, args.model, args.seed, args.programs)
        how = f"{TARGET_FACTOR:g} x vllm's mean at {UNLOADED_RATE:g} programs/s"
    print(f"{args.workload} x {args.programs} programs (seed {args.seed}), {args.model} on "
          f"{args.preset}; latency target {target:.4f} s/token ({how})", flush=True)
    points = sweep(args.workload, args.policies, args.rates, args.programs, args.seed,
                   preset=args.preset, model=args.model, progress=not args.no_progress)
    print()
    print(latency_table(points))
    print(capacity_table(points, target))
    argv = sys.argv[1:] if args.argv is None else args.argv
    command = "agentix bench " + " ".join(shlex.quote(a) for a in argv)
    md, png = write_outputs(points, target, args.out, command=command)
    print(f"wrote {md} and {png} in {time.perf_counter() - start:.1f} s")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentix bench", description=__doc__)
    sub = parser.add_subparsers(dest="bench_command", required=True)
    sim = sub.add_parser("sim", help="simulate a workload under a policy (virtual time)")
    sim.add_argument("--workload", choices=WORKLOADS, required=True)
    sim.add_argument("--policy", choices=sorted(BASELINES), default="atlas")
    sim.add_argument("--rate", type=_positive_float, default=1.0,
                     help="program arrivals per second (Poisson; 'inf': all at once)")
    sim.add_argument("--programs", type=_positive_int, default=100)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--preset", choices=sorted(GPU_PRESETS), default="a100-80g")
    sim.add_argument("--model", choices=sorted(MODEL_PRESETS), default="llama-3.1-8b")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(run=_sim)

    sw = sub.add_parser("sweep", help="policies x arrival rates: latency tables, capacities, plot")
    sw.add_argument("--workload", choices=WORKLOADS, required=True)
    sw.add_argument("--policies", type=_policy_list, default=list(BASELINES),
                    help="comma-separated baselines (default: all)")
    sw.add_argument("--rates", type=_rate_list, default=[0.05, 0.1, 0.2, 0.4],
                    help="comma-separated program arrival rates per second")
    sw.add_argument("--programs", type=_positive_int, default=100)
    sw.add_argument("--seed", type=int, default=0)
    sw.add_argument("--preset", choices=sorted(GPU_PRESETS), default="a100-80g")
    sw.add_argument("--model", choices=sorted(MODEL_PRESETS), default="llama-3.1-8b")
    sw.add_argument("--target", type=_positive_float, default=None,
                    help="latency target in s/token (default: derived from unloaded vllm)")
    sw.add_argument("--out", default="bench/results", help="folder for sweep_<workload>.md/.png")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(run=_sweep)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.run(args)


if __name__ == "__main__":
    main()
