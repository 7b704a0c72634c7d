"""Fixed-load comparisons: every policy at fixed fractions of a workload's knee, at steady
state, on several seeds (issue 39, item 2).

- The knee: the highest arrival rate (programs/s) at which a workload runs at steady state
  under `optimized` (`find_knee`: `bench.analysis.capacity.search` with no latency target,
  so only overload ends it, on one seed; or given by the caller from an earlier search).
  `find_knee` takes any policy: the knees of two policies are their capacities.
- Each seed gets one trace (`bench.analysis.steady_state.TracePrefixes`); every fraction f of
  `FixedLoadConfig.fractions` runs it at f x knee under every policy
  (`bench.analysis.steady_state.steady_run`: warm-up, window, tail, backlog watch), so the
  policies of one seed and load see the same programs arriving at the same times.
- Flat backlog, checked, not assumed: a run is `flat` when its verdict is steady, the
  backlog's growth over the window is within +-`flat_growth` of the window's programs, and
  the warm-up lasted at least twice the mean time in system (Little's law,
  `SteadyPoint.warm_enough`). Reports mark every run that is not.
- Figures per program class (a program's `workload`: the component of `mixed`, else the
  workload itself), and over all measured programs ("all"): mean and P99 normalized latency
  (s/token) and the P99 time to first token of the class's calls (s). Intervals over seeds:
  `bench.analysis.seed_stats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from bench.analysis.capacity import search
from bench.analysis.parallel_runs import Job, run_all
from bench.analysis.sweep import SweepPoint
from bench.analysis.steady_state import (SteadyConfig, TracePrefixes, Verdict, run_steady_point,
                                         steady_run)
from bench.sim.arrivals import POISSON, ArrivalProcess
from bench.sim.metrics import compute_metrics
from bench.sim.simulate import SimResult
from bench.sim.trace import Trace

FRACTIONS = (0.7, 0.85, 0.95)
SEEDS = (0, 1, 2)
FLAT_GROWTH = 0.1
ALL = "all"
KNEE_POLICY = "optimized"


def default_steady() -> SteadyConfig:
    """Warm-up 150 s of arrivals, a window of 200 programs, 600 s of arrivals after it."""
    return SteadyConfig(window_programs=200, warmup_seconds=150.0, tail_seconds=600.0)


@dataclass(frozen=True)
class FixedLoadConfig:
    """The knee (programs/s), the fractions of it to run, the seeds, the steady-state
    window, and the backlog growth (a fraction of the window's programs, either way) within
    which a run counts as flat."""

    knee: float
    fractions: tuple[float, ...] = FRACTIONS
    seeds: tuple[int, ...] = SEEDS
    steady: SteadyConfig = field(default_factory=default_steady)
    flat_growth: float = FLAT_GROWTH

    def __post_init__(self) -> None:
        if not 0 < self.knee < math.inf:
            raise ValueError(f"knee: must be positive and finite, got {self.knee}")
        if not self.fractions or not all(0 < f <= 1 for f in self.fractions):
            raise ValueError(f"fractions: must be non-empty, each in (0, 1], got "
                             f"{self.fractions}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: must be non-empty and distinct, got {self.seeds}")
        if not self.flat_growth > 0:
            raise ValueError(f"flat_growth: must be > 0, got {self.flat_growth}")

    def rate(self, fraction: float) -> float:
        """Programs/s at `fraction` of the knee."""
        return fraction * self.knee


@dataclass(frozen=True)
class ClassFigures:
    """One program class's figures in one run: how many measured programs it had, their
    mean and P99 normalized latency (s/token), and the P99 TTFT of their calls (s)."""

    programs: int
    mean: float
    p99: float
    ttft_p99: float


@dataclass(frozen=True)
class FixedRun:
    """One (seed, fraction, policy) run: its steady-state verdict, backlog growth, whether
    the warm-up was long enough, whether it counts as `flat`, and, when its verdict is
    steady, each class's figures (`ALL` first; empty otherwise)."""

    seed: int
    fraction: float
    rate: float
    policy: str
    verdict: str
    backlog_growth: float
    warm_enough: bool
    time_in_system: float
    flat: bool
    classes: dict[str, ClassFigures]
    sim_wall_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__ if k != "classes"},
                "classes": {name: vars(c) for name, c in self.classes.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FixedRun":
        classes = {name: ClassFigures(**c) for name, c in data["classes"].items()}
        return cls(**{**data, "classes": classes})


def class_figures(result: SimResult, measured: frozenset[str]) -> dict[str, ClassFigures]:
    """`ALL` over the `measured` programs of `result`, then each class (sorted) when there
    is more than one."""
    programs = [p for p in result.programs if p.program_id in measured]
    groups: dict[str, list] = {ALL: programs}
    names = sorted({p.workload for p in programs})
    if len(names) > 1:
        for name in names:
            groups[name] = [p for p in programs if p.workload == name]
    figures = {}
    for name, group in groups.items():
        metrics = compute_metrics(group)
        ids = {p.program_id for p in group}
        figures[name] = ClassFigures(len(group), metrics.mean_norm_latency,
                                     metrics.p99_norm_latency, result.ttft_percentile(99, ids))
    return figures


def is_flat(verdict: Verdict, growth: float, warm_enough: bool, flat_growth: float) -> bool:
    """Steady, |growth| <= `flat_growth`, and warm enough."""
    return verdict is Verdict.STEADY and abs(growth) <= flat_growth and warm_enough


def run_fixed_load(workload: str, policies: Sequence[str], config: FixedLoadConfig,
                   arrivals: ArrivalProcess = POISSON, preset: str = "a100-80g",
                   model: str = "llama-3.1-8b",
                   engine_overrides: dict[str, Any] | None = None,
                   on_run: Callable[[FixedRun], None] | None = None,
                   done_before: Mapping[tuple[int, float, str], FixedRun] | None = None,
                   jobs: int = 1) -> list[FixedRun]:
    """Every (seed, fraction, policy), returned in that nesting order; `on_run` sees each run
    as it ends (progress, or saving as it goes). `done_before`: runs of the same study
    settings by (seed, fraction, policy), taken as they are instead of simulated again (the
    simulator is deterministic, so they are what a new run would give). `jobs`: how many runs
    simulate at once, each in a worker process (`bench.analysis.parallel_runs`: the same
    runs whatever `jobs`; with more than one, `on_run` sees them in the order they end)."""
    if not policies:
        raise ValueError("policies: must not be empty")
    return run_all(_planned(workload, policies, config, arrivals, preset, model,
                            engine_overrides, done_before or {}), jobs, on_run)


def _planned(workload: str, policies: Sequence[str], config: FixedLoadConfig,
             arrivals: ArrivalProcess, preset: str, model: str,
             engine_overrides: dict[str, Any] | None,
             done_before: Mapping[tuple[int, float, str], FixedRun]
             ) -> Iterator[tuple[FixedRun | None, Job | None]]:
    """For each (seed, fraction, policy) in nesting order: its run done before, or the job
    that simulates it (one trace per seed, generated when the seed's first job is reached)."""
    for seed in config.seeds:
        traces = TracePrefixes(workload, seed, arrivals)
        for fraction in config.fractions:
            rate = config.rate(fraction)
            for policy in policies:
                done = done_before.get((seed, fraction, policy))
                if done is not None:
                    yield done, None
                    continue
                base = traces.first(config.steady.total_programs(rate))
                yield None, (_run_one, (workload, base, seed, fraction, rate, policy, config,
                                        preset, model, engine_overrides))


def _run_one(workload: str, base: Trace, seed: int, fraction: float, rate: float,
             policy: str, config: FixedLoadConfig, preset: str, model: str,
             engine_overrides: dict[str, Any] | None) -> FixedRun:
    done = steady_run(workload, base, seed, policy, rate, config.steady, preset, model,
                      engine_overrides=engine_overrides)
    point = done.point
    steady = point.verdict is Verdict.STEADY
    return FixedRun(seed, fraction, rate, policy, point.verdict.value, point.backlog_growth,
                    point.warm_enough, point.time_in_system,
                    is_flat(point.verdict, point.backlog_growth, point.warm_enough,
                            config.flat_growth),
                    class_figures(done.result, done.measured) if steady else {},
                    point.point.sim_wall_seconds)


def find_knee(workload: str, steady: SteadyConfig, start_rate: float, iterations: int = 2,
              seed: int = 0, arrivals: ArrivalProcess = POISSON, preset: str = "a100-80g",
              model: str = "llama-3.1-8b",
              engine_overrides: dict[str, Any] | None = None, policy: str = KNEE_POLICY
              ) -> tuple[float | None, list[SweepPoint]]:
    """The highest steady rate `policy` reached on `seed` (None if even the lowest rate
    tried was overloaded), and the points run: `search` brackets from `start_rate` by
    doubling or halving, then bisects `iterations` times, with no latency target."""
    traces = TracePrefixes(workload, seed, arrivals)

    def point_at(rate: float) -> SweepPoint:
        return run_steady_point(workload, traces.first(steady.total_programs(rate)), seed,
                                policy, rate, steady, preset, model,
                                engine_overrides=engine_overrides).point

    points = search(point_at, math.inf, start_rate, iterations)
    steady_rates = [p.rate for p in points if not p.overloaded
                    and p.programs_completed >= p.num_programs]
    return (max(steady_rates) if steady_rates else None), points
