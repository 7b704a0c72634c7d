"""Capacity search: the arrival rate at which each policy's mean normalized latency reaches the
latency target, found by bracketing and bisection instead of a fixed grid of rates.

The policies' capacities can be an order of magnitude apart (`vllm` against `atlas`), so a
shared grid is either coarse or slow. Here every policy gets its own rates:

1. start at `start_rate`; double while the target is met, halve while it is missed (at most
   `max_expansions` times each way), which brackets the crossing between a meeting rate and
   a missing one;
2. bisect the bracket in log(rate) `iterations` times;
3. the capacity is interpolated from all points run (`bench.sweep.capacity`).

One trace is generated at 1 program/s and time-scaled for every rate (`retimed`: arrival /
rate, the same programs in the same Poisson pattern), so all policies and rates see the same
programs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from tqdm import tqdm

from bench.sweep import (SweepPoint, capacity_table, generate_trace, meets_target,
                         plot_latency, run_point)
from bench.trace import Trace

BASE_RATE = 1.0


def retimed(trace: Trace, rate: float, base_rate: float = BASE_RATE) -> Trace:
    """`trace` (generated at `base_rate`) with every arrival scaled to `rate`."""
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"rate: must be positive and finite, got {rate}")
    scale = base_rate / rate
    return Trace(tuple(replace(p, arrival=p.arrival * scale) for p in trace.programs))


def search(run: Callable[[float], SweepPoint], target: float, start_rate: float,
           iterations: int = 3, max_expansions: int = 8) -> list[SweepPoint]:
    """Points run by `run(rate)` to bracket and bisect one policy's crossing of `target`,
    in the order run. Stops early when no bracket is found within `max_expansions`."""
    if not start_rate > 0:
        raise ValueError(f"start_rate: must be > 0, got {start_rate}")
    if iterations < 0 or max_expansions < 0:
        raise ValueError("iterations and max_expansions must be >= 0")
    points = [run(start_rate)]
    meets = meets_target(points[0], target)
    factor = 2.0 if meets else 0.5
    for _ in range(max_expansions):
        points.append(run(points[-1].rate * factor))
        if meets_target(points[-1], target) != meets:
            break
    else:
        return points
    low, high = sorted(points[-2:], key=lambda p: p.rate)
    for _ in range(iterations):
        mid = run(math.sqrt(low.rate * high.rate))
        points.append(mid)
        low, high = (mid, high) if meets_target(mid, target) else (low, mid)
    return points


def find_capacities(workload: str, policies: Sequence[str], target: float, num_programs: int,
                    seed: int, start_rate: float, iterations: int = 3,
                    preset: str = "a100-80g", model: str = "llama-3.1-8b",
                    progress: bool = True) -> list[SweepPoint]:
    """Run `search` for every policy on one trace; all points, policy by policy."""
    base = generate_trace(workload, num_programs, seed, BASE_RATE)
    points: list[SweepPoint] = []
    bar = tqdm(desc=f"capacity {workload}", unit="run", disable=not progress)
    try:
        for policy in policies:
            def run(rate: float, policy: str = policy) -> SweepPoint:
                bar.set_postfix_str(f"{policy} @ {rate:.3g}/s")
                point = run_point(workload, retimed(base, rate), policy, rate, preset, model)
                bar.update(1)
                return point

            points += search(run, target, start_rate, iterations)
    finally:
        bar.close()
    return points


def points_table(points: Sequence[SweepPoint]) -> str:
    """Markdown, one row per run (policies in first-seen order, rates ascending): latencies
    (mean, P95, P99), throughput, completed programs, simulation wall time."""
    order = {policy: i for i, policy in enumerate(dict.fromkeys(p.policy for p in points))}
    lines = ["| policy | rate (programs/s) | mean | P95 | P99 | throughput (tokens/s) | "
             "completed | sim seconds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in sorted(points, key=lambda q: (order[q.policy], q.rate)):
        lines.append(f"| {p.policy} | {p.rate:.3g} | {p.mean_norm_latency:.4f} | "
                     f"{p.p95_norm_latency:.4f} | {p.p99_norm_latency:.4f} | "
                     f"{p.throughput_tokens_per_s:.0f} | {p.programs_completed}/{p.num_programs} "
                     f"| {p.sim_wall_seconds:.1f} |")
    return "\n".join(lines) + "\n"


def write_outputs(points: Sequence[SweepPoint], target: float, how: str, out_dir: str | Path,
                  command: str) -> tuple[Path, Path]:
    """Write `capacity_<workload>.md` (command, target, capacity table, every run) and
    `capacity_<workload>.png` (latency against rate per policy) into `out_dir`."""
    workload = points[0].workload
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = out / f"capacity_{workload}.md", out / f"capacity_{workload}.png"
    md_path.write_text("\n".join([
        f"# Capacity search: {workload}", "", "```", command, "```", "",
        f"Latency target: {target:.4f} s/token ({how})", "",
        capacity_table(points, target), "Every run (latencies in s/token):", "",
        points_table(points)]))
    plot_latency(points, target, png_path, f"{workload}: latency against rate")
    return md_path, png_path

