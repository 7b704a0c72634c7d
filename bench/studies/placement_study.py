"""The load-balancer experiments in the multi-engine simulator
(`python -m bench.studies.placement_study`): capacity per placement, capacity scaling with replicas,
and a cutoff sweep.

Every engine runs ATLAS (Llama-3.1-8B on A100-80GB). Each (workload, program count) has one trace
generated at 1 program/s and time-scaled to every rate (`bench.analysis.capacity.retimed`), and one
latency target (`bench.analysis.sweep.latency_target`: 5 x unloaded vLLM on one engine). A capacity
is found as `agentix bench capacity` finds it (`bench.analysis.capacity.search`: double or halve to
a bracket, then bisect in log rate) and interpolated by `bench.analysis.sweep.capacity`. The
cache-hit rate (cached over prompt tokens) shown with a capacity is that of the fastest run meeting
the target. Searches run in `--jobs` worker processes.

    capacity   every placement x workload at --replicas (default 4)
    scaling    each variant at 1, 2, 4 and 8 replicas on mixed, programs scaled with replicas:
               capacity, or the run at --per-replica-rate x replicas
    cutoff     the cutoff rule at cutoffs 256 to 16,384 and auto, at a given rate per workload

Writes `<out>/<study>.json` (every run) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.analysis.capacity import BASE_RATE, memoized, retimed, search
from bench.analysis.sweep import SweepPoint, capacity, generate_trace, latency_target, meets_target
from bench.sim.metrics import compute_metrics
from bench.sim.multi_sim import simulate_replicas
from scheduler.placement import make_placement

POLICY = "atlas"
VARIANTS = {"cutoff": ("cutoff", 2048), "cutoff-auto": ("cutoff", "auto"),
            "round_robin": ("round_robin", 2048), "least_loaded": ("least_loaded", 2048),
            "pinned": ("pinned", 2048), "prefix_aware": ("prefix_aware", 2048),
            "agentix": ("agentix", 2048)}
PROGRAMS = {"mixed": 200, "sharegpt": 400, "lats": 60}
START_RATE = {"mixed": 16.0, "sharegpt": 24.0, "lats": 4.0}
CUTOFFS = (256, 512, 1024, 2048, 4096, 8192, 16384)
REPLICA_COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Run:
    """One simulation: a placement variant on `replicas` engines at `rate` programs/s."""

    workload: str
    variant: str
    replicas: int
    rate: float
    num_programs: int
    programs_completed: int
    mean_norm_latency: float
    cache_hit_rate: float
    final_cutoff: float | None

    def point(self) -> SweepPoint:
        """As a SweepPoint (for bench.analysis.sweep's capacity and target checks)."""
        nan = float("nan")
        return SweepPoint(self.workload, self.variant, self.rate, self.num_programs,
                          self.programs_completed, self.mean_norm_latency, nan, nan, nan, nan,
                          nan, nan, 0, 0, 0.0)


def run_one(workload: str, programs: int, variant: str, replicas: int, rate: float,
            cutoff: int | str | None = None, seed: int = 0) -> Run:
    name, default_cutoff = VARIANTS[variant]
    placement = make_placement(name, default_cutoff if cutoff is None else cutoff)
    trace = retimed(generate_trace(workload, programs, seed, BASE_RATE), rate)
    result = simulate_replicas(trace, POLICY, replicas=replicas, placement=placement)
    metrics = compute_metrics(result.programs)
    return Run(workload, variant, replicas, rate, programs, metrics.programs_completed,
               metrics.mean_norm_latency, result.extra["cache_hit_rate"],
               getattr(placement, "cutoff", None))


def capacity_search(workload: str, programs: int, variant: str, replicas: int, target: float,
                    start_rate: float, iterations: int) -> list[Run]:
    """The runs of one capacity search, in the order run."""
    runs: list[Run] = []

    def at(rate: float) -> SweepPoint:
        runs.append(run_one(workload, programs, variant, replicas, rate))
        return runs[-1].point()

    search(memoized(at), target, start_rate, iterations)
    return runs


def summarize(runs: list[Run], target: float) -> dict:
    """Capacity and the cache-hit rate of the fastest run meeting the target."""
    found = capacity([r.point() for r in runs], runs[0].variant, target)
    meeting = [r for r in runs if meets_target(r.point(), target)]
    best = max(meeting, key=lambda r: r.rate) if meeting else None
    return {"capacity": found, "cache_hit_rate": best.cache_hit_rate if best else None,
            "final_cutoff": best.final_cutoff if best else None}


def capacity_study(args: argparse.Namespace, pool: ProcessPoolExecutor) -> dict:
    jobs = {}
    for workload in args.workloads:
        target = latency_target(workload)
        for variant in args.variants:
            jobs[workload, variant] = (target, pool.submit(
                capacity_search, workload, args.programs or PROGRAMS[workload], variant,
                args.replicas, target, args.start_rate or START_RATE[workload],
                args.iterations))
    out = {}
    for (workload, variant), (target, future) in jobs.items():
        runs = future.result()
        out.setdefault(workload, {"target": target, "variants": {}})["variants"][variant] = {
            **summarize(runs, target), "runs": [asdict(r) for r in runs]}
    return out


def scaling_study(args: argparse.Namespace, pool: ProcessPoolExecutor) -> dict:
    """Each variant at 1, 2, 4 and 8 replicas on mixed, `--programs` per replica: its
    capacity (as `capacity_study` finds it), or with `--per-replica-rate` its run at that rate
    times the replicas (linear scaling keeps its latency and hit rate flat)."""
    target = latency_target("mixed")
    per_replica = args.programs or 50
    jobs = {}
    for variant in args.variants:
        for n in REPLICA_COUNTS:
            if args.per_replica_rate:
                jobs[variant, n] = pool.submit(run_one, "mixed", per_replica * n, variant, n,
                                               args.per_replica_rate * n)
            else:
                jobs[variant, n] = pool.submit(capacity_search, "mixed", per_replica * n,
                                               variant, n, target,
                                               (args.start_rate or 4.0) * n, args.iterations)
    out: dict = {"target": target, "programs_per_replica": per_replica,
                 "per_replica_rate": args.per_replica_rate, "variants": {}}
    for (variant, n), future in jobs.items():
        result = future.result()
        entry = (asdict(result) if args.per_replica_rate else
                 {**summarize(result, target), "runs": [asdict(r) for r in result]})
        out["variants"].setdefault(variant, {})[n] = entry
    if not args.per_replica_rate:
        for entries in out["variants"].values():
            one = entries[1]["capacity"]
            for n, entry in entries.items():
                entry["of_linear"] = (entry["capacity"] / (n * one)
                                      if one and entry["capacity"] else None)
    return out


def cutoff_study(args: argparse.Namespace, pool: ProcessPoolExecutor) -> dict:
    rates = dict(zip(args.workloads, args.rates))
    jobs = {(w, c): pool.submit(run_one, w, args.programs or PROGRAMS[w], "cutoff",
                                args.replicas, rates[w], c)
            for w in args.workloads for c in (*CUTOFFS, "auto")}
    out: dict = {}
    for (workload, cutoff), future in jobs.items():
        out.setdefault(workload, {"rate": rates[workload], "cutoffs": {}})["cutoffs"][
            str(cutoff)] = asdict(future.result())
    return out


def capacity_table(out: dict) -> str:
    variants = list(next(iter(out.values()))["variants"])
    lines = ["| workload (target s/token) | " + " | ".join(variants)
             + " | cutoff vs round_robin / least_loaded / prefix_aware | auto vs fixed |",
             "|" + " --- |" * (len(variants) + 3)]
    for workload, entry in out.items():
        v = entry["variants"]

        def cell(name: str) -> str:
            c, hit = v[name]["capacity"], v[name]["cache_hit_rate"]
            return "-" if c is None else f"{c:.3g} ({hit:.0%} hit)"

        def ratio(a: str, b: str) -> str:
            x, y = v.get(a, {}).get("capacity"), v.get(b, {}).get("capacity")
            return f"{x / y:.2f}x" if x and y else "-"

        lines.append(f"| {workload} ({entry['target']:.4f}) | "
                     + " | ".join(cell(n) for n in variants) + " | "
                     + " / ".join(ratio("cutoff", b) for b in
                                  ("round_robin", "least_loaded", "prefix_aware"))
                     + f" | {ratio('cutoff-auto', 'cutoff')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=("capacity", "scaling", "cutoff"))
    parser.add_argument("--workloads", default="mixed,sharegpt,lats",
                        type=lambda s: s.split(","))
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        type=lambda s: [v for v in s.split(",") if v in VARIANTS or
                                        parser.error(f"--variants: unknown {v!r}")])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--programs", type=int, help="programs per workload (scaling: per "
                                                     "replica; default: per workload)")
    parser.add_argument("--start-rate", type=float, help="first rate tried (default: per "
                                                         "workload; scaling: per replica)")
    parser.add_argument("--iterations", type=int, default=2, help="bisection steps")
    parser.add_argument("--per-replica-rate", type=float,
                        help="scaling study: one run per replica count at this rate times "
                             "the replicas instead of a capacity search")
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")],
                        help="cutoff study: the rate of each workload, in order")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--out", default="bench/results/placement")
    args = parser.parse_args(argv)
    if args.study == "cutoff" and (not args.rates or len(args.rates) != len(args.workloads)):
        parser.error("cutoff: --rates needs one rate per workload")
    study = {"capacity": capacity_study, "scaling": scaling_study, "cutoff": cutoff_study}
    with ProcessPoolExecutor(args.jobs) as pool:
        out = study[args.study](args, pool)
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{args.study}.json").write_text(json.dumps(out, indent=1, default=str))
    if args.study == "capacity":
        print(capacity_table(out))
    else:
        print(json.dumps(_brief(out), indent=1, default=str))


def _brief(out: dict) -> dict:
    """The study's figures without the per-run lists."""
    if isinstance(out, dict):
        return {k: _brief(v) for k, v in out.items() if k != "runs"}
    return out


if __name__ == "__main__":
    main()
