"""Retention rules side by side: `python -m bench.studies.retention_study --workload W --rate R
--programs N [--seed S] [--policy P] [--set FIELD=VALUE]`.

One trace, replayed in the simulator under three memory settings of the same policy:
`ttl` (retain 2 x the mean observed tool time, no prefetch: the rule before the learnt one),
`learnt` (scheduler.tool_times, no prefetch: the default) and `learnt+prefetch`. Prints one
markdown row each: mean and P99 normalised latency, TTFT P99, prefill tokens computed, the
ratios of each to `ttl`'s, and the KV moved (blocks offloaded to host, fetched back for a
call, prefetched back before one) with the retention counts.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.analysis.sweep import generate_trace
from bench.sim.metrics import compute_metrics
from bench.sim.simulate import SimResult, simulate
from server.config_flags import parse_override

VARIANTS: dict[str, dict[str, Any]] = {
    "ttl": dict(retention_rule="ttl", prefetch=False),
    "learnt": dict(retention_rule="learnt", prefetch=False),
    "learnt+prefetch": dict(retention_rule="learnt", prefetch=True),
}
KV_STATS = ("retentions", "retentions_expired", "offloaded_blocks", "fetched_blocks",
            "prefetched_blocks")


def figures(result: SimResult) -> dict[str, float]:
    metrics = compute_metrics(result.programs)
    return {"mean": metrics.mean_norm_latency, "p99": metrics.p99_norm_latency,
            "ttft_p99": result.ttft_percentile(99),
            "prefill": float(result.prefill_tokens_computed),
            **{name: float(result.scheduler_stats[name]) for name in KV_STATS}}


def compare(workload: str, rate: float, num_programs: int, seed: int, policy: str,
            overrides: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each variant's figures on one trace (`overrides` apply to all three)."""
    trace = generate_trace(workload, num_programs, seed, rate)
    return {name: figures(simulate(trace, policy, engine_overrides={**overrides, **variant}))
            for name, variant in VARIANTS.items()}


def table(rows: dict[str, dict[str, float]]) -> str:
    base = rows["ttl"]
    lines = ["| rule | mean s/tok (x ttl) | P99 s/tok (x ttl) | TTFT P99 s (x ttl) | "
             "prefill tokens (x ttl) | retentions / expired | offloaded / fetched / "
             "prefetched blocks |", "|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        ratio = {k: f[k] / base[k] if base[k] else float("nan")
                 for k in ("mean", "p99", "ttft_p99", "prefill")}
        lines.append(
            f"| {name} | {f['mean']:.4f} ({ratio['mean']:.3f}) | {f['p99']:.4f} "
            f"({ratio['p99']:.3f}) | {f['ttft_p99']:.2f} ({ratio['ttft_p99']:.3f}) | "
            f"{f['prefill']:.0f} ({ratio['prefill']:.3f}) | {f['retentions']:.0f} / "
            f"{f['retentions_expired']:.0f} | {f['offloaded_blocks']:.0f} / "
            f"{f['fetched_blocks']:.0f} / {f['prefetched_blocks']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.retention_study",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--programs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=777)
    parser.add_argument("--policy", default="atlas")
    parser.add_argument("--set", type=parse_override, action="append", default=[],
                        metavar="FIELD=VALUE", help="an engine config field for all variants")
    args = parser.parse_args(argv)
    rows = compare(args.workload, args.rate, args.programs, args.seed, args.policy,
                   dict(args.set))
    print(f"{args.workload} x {args.programs} programs at {args.rate}/s (seed {args.seed}), "
          f"policy {args.policy}{' ' + str(dict(args.set)) if args.set else ''}")
    print(table(rows))


if __name__ == "__main__":
    main()
