"""Rate sweep: every policy at every arrival rate on one workload, in the simulator.

For each rate the trace is generated once (same seed, so the same programs; only the arrival
times scale with the rate) and replayed under every policy, so the policies see identical input.

A policy's *capacity* is the arrival rate at which its mean normalized latency reaches a latency
target: interpolated between the last swept rate that meets it and the first that misses. The
relative target is fixed per workload and preset: `TARGET_FACTOR` times the mean normalized
latency of the `vllm` baseline on that workload at `UNLOADED_RATE` (programs arrive so rarely
that they barely overlap), so it does not depend on the rates swept or on the policies compared.
Tables, files and the plot of the points are in `bench.analysis.sweep_report`.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass
from typing import Any, Collection, Iterable, Iterator, Sequence

from tqdm import tqdm

from bench.analysis.parallel_runs import Job, run_all
from bench.sim.arrivals import POISSON, ArrivalProcess, retime
from bench.sim.metrics import compute_metrics
from bench.sim.multi_sim import DEFAULT_CUTOFF, replica_options, simulate_replicas
from bench.sim.simulate import EarlyStop, SimResult, simulate
from bench.sim.trace import Trace

TARGET_FACTOR = 5.0
UNLOADED_RATE = 0.01  # programs/s: an unloaded system for the latency target
TARGET_PROGRAMS = 20  # at most this many programs for the target run (it only needs a mean)


@dataclass(frozen=True)
class SweepPoint:
    """One (policy, rate) run; program latencies are normalized (seconds per generated token),
    the time to first token is per call (seconds from being added to its first token);
    `prefill_tokens_computed` counts prompts less prefix hits plus recomputed KV.
    `overloaded`: a steady-state run found the rate past capacity (`bench.analysis.steady_state`):
    its latencies describe a run that did not settle, so the point misses every target."""

    workload: str
    policy: str
    rate: float
    num_programs: int
    programs_completed: int
    mean_norm_latency: float
    p95_norm_latency: float
    p99_norm_latency: float
    throughput_tokens_per_s: float
    makespan_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    prefill_tokens_computed: int
    num_preemptions: int
    sim_wall_seconds: float
    overloaded: bool = False
    itl_p99_s: float = 0.0  # the measured calls' inter-token gaps (0: no gap)

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def generate_trace(workload: str, num_programs: int, seed: int, rate: float) -> Trace:
    generator = importlib.import_module(f"bench.sim.workloads.{workload}")
    return generator.generate(num_programs, seed, rate)


def sweep(workload: str, policies: Sequence[str], rates: Sequence[float], num_programs: int,
          seed: int, preset: str = "a100-80g", model: str = "llama-3.1-8b",
          progress: bool = True, replicas: int = 1, placement: str | None = None,
          cutoff: int | str = DEFAULT_CUTOFF,
          placement_options: dict | None = None,
          arrivals: ArrivalProcess = POISSON, jobs: int = 1) -> list[SweepPoint]:
    """Simulate every policy at every rate (on `replicas` engines behind `placement` when
    either is given: `run_point`), programs arriving by `arrivals`
    (`bench.sim.arrivals.retime`); returns the points in (rate, policy) order. `jobs`: how
    many points simulate at once, each in a worker process (`bench.analysis.parallel_runs`:
    the same points whatever `jobs`)."""
    multi = replica_options(replicas, placement, cutoff, placement_options)
    if not policies:
        raise ValueError("policies: must not be empty")
    if not rates:
        raise ValueError("rates: must not be empty")
    bar = tqdm(total=len(policies) * len(rates), desc=f"sweep {workload}", unit="run",
               disable=not progress)

    def planned() -> Iterator[tuple[None, Job]]:
        for rate in rates:
            trace = retime(generate_trace(workload, num_programs, seed, rate), arrivals,
                           rate, seed)
            for policy in policies:
                yield None, (_point, (workload, trace, policy, rate, preset, model, multi))

    def ended(point: SweepPoint) -> None:
        bar.set_postfix_str(f"{point.policy} @ {point.rate:g}/s")
        bar.update(1)

    try:
        return run_all(planned(), jobs, ended)
    finally:
        bar.close()


def _point(workload: str, trace: Trace, policy: str, rate: float, preset: str, model: str,
           multi: dict[str, Any]) -> SweepPoint:
    """`run_point` with `replica_options`' keywords (a job's function takes positions)."""
    return run_point(workload, trace, policy, rate, preset, model, **multi)


def run_point(workload: str, trace: Trace, policy: str, rate: float,
              preset: str = "a100-80g", model: str = "llama-3.1-8b", replicas: int = 1,
              placement: str | None = None,
              cutoff: int | str = DEFAULT_CUTOFF,
              placement_options: dict | None = None) -> SweepPoint:
    """Simulate `trace` (arriving at `rate`) under `policy` and summarize it: on one engine
    (`simulate`), or on `replicas` engines behind `placement` (`simulate_replicas`; the
    placement defaults to `scheduler.placement.DEFAULT_PLACEMENT`) when either is given."""
    result = simulate_trace(trace, policy, preset, model,
                            replica_options(replicas, placement, cutoff, placement_options))
    return summarize(workload, policy, rate, result, len(trace.programs))


def simulate_trace(trace: Trace, policy: str, preset: str, model: str, multi: dict[str, Any],
                   stop: EarlyStop | None = None,
                   engine_overrides: dict[str, Any] | None = None) -> SimResult:
    """`simulate` (`multi` empty) or `simulate_replicas(**multi)` (`replica_options`), to the
    end or to `stop`, with `engine_overrides` on every engine's config."""
    if multi:
        return simulate_replicas(trace, policy, preset=preset, model=model, stop=stop,
                                 engine_overrides=engine_overrides, **multi)
    return simulate(trace, policy, preset=preset, model=model, stop=stop,
                    engine_overrides=engine_overrides)


def summarize(workload: str, policy: str, rate: float, result: SimResult, num_programs: int,
              measured: Collection[str] | None = None, overloaded: bool = False) -> SweepPoint:
    """The `SweepPoint` of `result`, a run of `num_programs` programs: latencies, throughput
    TTFTs and inter-token gaps over the programs in `measured` (ids; default: all),
    counters over the run."""
    programs = result.programs if measured is None else [
        p for p in result.programs if p.program_id in measured]
    m = compute_metrics(programs)
    return SweepPoint(
        workload=workload, policy=policy, rate=rate, num_programs=num_programs,
        programs_completed=m.programs_completed, mean_norm_latency=m.mean_norm_latency,
        p95_norm_latency=m.p95_norm_latency, p99_norm_latency=m.p99_norm_latency,
        throughput_tokens_per_s=m.throughput_tokens_per_s, makespan_s=m.makespan_s,
        ttft_p50_s=result.ttft_percentile(50, measured),
        ttft_p99_s=result.ttft_percentile(99, measured),
        prefill_tokens_computed=result.prefill_tokens_computed,
        num_preemptions=result.num_preemptions, sim_wall_seconds=result.wall_seconds,
        overloaded=overloaded, itl_p99_s=result.itl_percentile(99, measured))


def latency_target(workload: str, preset: str = "a100-80g", model: str = "llama-3.1-8b",
                   seed: int = 0, num_programs: int = TARGET_PROGRAMS) -> float:
    """`TARGET_FACTOR` x the mean normalized latency of `vllm` on `workload` at `UNLOADED_RATE`
    (with at most `TARGET_PROGRAMS` programs, which is enough for an unloaded mean), Poisson
    arrivals whatever a run's process: the target is the same for every process."""
    n = max(1, min(num_programs, TARGET_PROGRAMS))
    trace = generate_trace(workload, n, seed, UNLOADED_RATE)
    metrics = compute_metrics(simulate(trace, "vllm", preset=preset, model=model).programs)
    if metrics.programs_completed == 0:
        raise RuntimeError(f"latency target: no {workload} program completed under vllm")
    return TARGET_FACTOR * metrics.mean_norm_latency


# ----- capacity --------------------------------------------------------------------------------
def meets_target(point: SweepPoint, target: float) -> bool:
    """Not overloaded, every program completed and the mean normalized latency within
    `target`."""
    return (not point.overloaded and point.programs_completed >= point.num_programs
            and not math.isnan(point.mean_norm_latency)
            and point.mean_norm_latency <= target)


def capacity(points: Iterable[SweepPoint], policy: str, target: float) -> float | None:
    """The arrival rate at which `policy`'s mean normalized latency reaches `target`.

    Walks the swept rates upwards while each meets the target (`meets_target`). At the first
    rate that misses it, the crossing is interpolated linearly in log(rate) against
    log(latency) from the last meeting rate (no interpolation towards a run that did not
    complete or was overloaded: the last meeting rate is returned). All swept rates meeting:
    the highest. None if the lowest swept rate misses or the policy was not swept."""
    own = sorted((p for p in points if p.policy == policy), key=lambda p: p.rate)
    best: SweepPoint | None = None
    for point in own:
        if meets_target(point, target):
            best = point
            continue
        if best is None:
            return None
        if point.overloaded or point.programs_completed < point.num_programs or \
                not point.mean_norm_latency > best.mean_norm_latency > 0:
            return best.rate
        fraction = (math.log(target / best.mean_norm_latency)
                    / math.log(point.mean_norm_latency / best.mean_norm_latency))
        return best.rate * (point.rate / best.rate) ** fraction
    return best.rate if best else None
