"""Capacity search: the arrival rate at which each policy's mean normalized latency reaches
each latency target, found by bracketing and bisection instead of a fixed grid of rates.

The policies' capacities can be an order of magnitude apart (`vllm` against `atlas`), so a
shared grid is either coarse or slow. Here every policy gets its own rates:

1. start at `start_rate`; double while the target is met, halve while it is missed (at most
   `max_expansions` times each way), which brackets the crossing between a meeting rate and
   a missing one;
2. bisect the bracket in log(rate) `iterations` times;
3. the capacity is interpolated from all points run (`bench.analysis.sweep.capacity`).

With several targets (the relative one, then a fixed one) a policy's searches run one after
the other and share its runs: a (policy, rate) pair already run is never run again, so the
second search walks the first one's doubling ladder for free.

One trace is generated at 1 program/s and time-scaled for every rate (`retimed`: arrival /
rate, the same programs in the same arrival pattern, Poisson or a `bench.sim.arrivals`
process), so all policies and rates see the same programs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tqdm import tqdm

from bench.analysis.parallel_runs import Job, run_all
from bench.analysis.sweep import SweepPoint, generate_trace, meets_target, run_point
from bench.analysis.sweep_report import capacity_table, plot_latency, points_table
from bench.sim.arrivals import POISSON, ArrivalProcess, retime
from bench.sim.multi_sim import DEFAULT_CUTOFF, replica_options
from bench.sim.trace import Trace

BASE_RATE = 1.0
MAX_EXPANSIONS = 8  # doublings (or halvings) tried for a bracket, at most


@dataclass(frozen=True)
class LatencyTarget:
    """A mean normalized latency target (s/token) and how it was chosen (for the report)."""

    seconds_per_token: float
    how: str


def retimed(trace: Trace, rate: float, base_rate: float = BASE_RATE) -> Trace:
    """`trace` (generated at `base_rate`) with every arrival scaled to `rate`."""
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"rate: must be positive and finite, got {rate}")
    scale = base_rate / rate
    return Trace(tuple(replace(p, arrival=p.arrival * scale) for p in trace.programs))


def search(run: Callable[[float], SweepPoint], target: float, start_rate: float,
           iterations: int = 3, max_expansions: int = MAX_EXPANSIONS) -> list[SweepPoint]:
    """Points run by `run(rate)` to bracket and bisect one policy's crossing of `target`,
    in the order run. Stops early when no bracket is found within `max_expansions` (0: runs
    `start_rate` only)."""
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


def find_capacities(workload: str, policies: Sequence[str], targets: Sequence[float],
                    num_programs: int, seed: int, start_rate: float, iterations: int = 3,
                    preset: str = "a100-80g", model: str = "llama-3.1-8b",
                    progress: bool = True, replicas: int = 1, placement: str | None = None,
                    cutoff: int | str = DEFAULT_CUTOFF,
                    placement_options: dict | None = None,
                    max_expansions: int = MAX_EXPANSIONS,
                    arrivals: ArrivalProcess = POISSON, jobs: int = 1) -> list[SweepPoint]:
    """Run `search` for every policy and then every target on one trace (programs arriving
    by `arrivals`, `bench.sim.arrivals.retime`); every (policy, rate) pair is run once (on `replicas` engines behind `placement` when either is given, see
    `run_point`: the rates found are those of the whole group). `jobs`: how many policies'
    searches run at once, each in a worker process (`bench.analysis.parallel_runs`: the
    same points whatever `jobs`). Returns the points, policy by policy, in the order run."""
    multi = replica_options(replicas, placement, cutoff, placement_options)
    base = retime(generate_trace(workload, num_programs, seed, BASE_RATE), arrivals, BASE_RATE,
                  seed)
    with tqdm(desc=f"capacity {workload}", unit="run", disable=not progress) as bar:
        return run_searches(lambda here: (
            (_finite_search, (workload, policy, base, targets, start_rate, iterations, preset,
                              model, multi, max_expansions, here)) for policy in policies),
            jobs, bar)


def _finite_search(workload: str, policy: str, base: Trace, targets: Sequence[float],
                   start_rate: float, iterations: int, preset: str, model: str,
                   multi: dict[str, Any], max_expansions: int,
                   bar: tqdm | None) -> list[SweepPoint]:
    """One policy's `search_policies` on the finite trace `base` (a job of
    `find_capacities`)."""
    return search_policies(
        [policy], targets, lambda policy, rate: run_point(
            workload, retimed(base, rate), policy, rate, preset, model, **multi),
        start_rate, iterations, bar, max_expansions)


def run_searches(searches: Callable[[tqdm | None], Iterable[Job]], jobs: int,
                 bar: tqdm) -> list[Any]:
    """The runs of the search jobs `searches(here)` plans (each job returns its search's
    runs), in planned order, `jobs` at a time (`bench.analysis.parallel_runs`). With one job
    at a time `here` is `bar`, for the searches to count their runs as they go; else it is
    None, and a worker's runs are counted when its search ends."""
    here = bar if jobs == 1 else None
    done = run_all(((None, job) for job in searches(here)), jobs,
                   None if here is not None else lambda runs: bar.update(len(runs)))
    return [run for runs in done for run in runs]


def search_policies(policies: Sequence[str], targets: Sequence[float],
                    point_at: Callable[[str, float], SweepPoint], start_rate: float,
                    iterations: int = 3, bar: tqdm | None = None,
                    max_expansions: int = MAX_EXPANSIONS) -> list[SweepPoint]:
    """`search` every target for every policy, a policy's targets one after the other, with
    `point_at(policy, rate)` run once per (policy, rate) pair (`memoized`); `bar`, if given,
    shows the pair being run and counts the runs. Returns the points in the order run."""
    points: list[SweepPoint] = []
    for policy in policies:
        def run(rate: float, policy: str = policy) -> SweepPoint:
            if bar is not None:
                bar.set_postfix_str(f"{policy} @ {rate:.3g}/s")
            points.append(point_at(policy, rate))
            if bar is not None:
                bar.update(1)
            return points[-1]

        once = memoized(run)
        for target in targets:
            search(once, target, start_rate, iterations, max_expansions)
    return points


def memoized(run: Callable[[float], SweepPoint]) -> Callable[[float], SweepPoint]:
    """`run` that runs each rate once and gives back the first point for a repeated rate."""
    seen: dict[float, SweepPoint] = {}

    def once(rate: float) -> SweepPoint:
        if rate not in seen:
            seen[rate] = run(rate)
        return seen[rate]

    return once


def write_outputs(points: Sequence[SweepPoint], targets: Sequence[LatencyTarget],
                  out_dir: str | Path, command: str) -> tuple[Path, Path]:
    """Write `capacity_<workload>.md` (command, targets, one capacity table per target, every
    run) and `capacity_<workload>.png` (latency against rate per policy, each target dashed)
    into `out_dir`."""
    workload = points[0].workload
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = out / f"capacity_{workload}.md", out / f"capacity_{workload}.png"
    parts = [f"# Capacity search: {workload}", "", "```", command, "```", "",
             "Latency targets: " + "; ".join(_describe(t) for t in targets), ""]
    for target in targets:
        parts += [f"## Target {_describe(target)}", "",
                  capacity_table(points, target.seconds_per_token)]
    parts += ["## Every run (latencies in s/token)", "", points_table(points)]
    md_path.write_text("\n".join(parts))
    plot_latency(points, [t.seconds_per_token for t in targets], png_path,
                 f"{workload}: latency against rate")
    return md_path, png_path


def _describe(target: LatencyTarget) -> str:
    return f"{target.seconds_per_token:.4f} s/token ({target.how})"
