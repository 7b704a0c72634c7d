"""Steady-state capacity: latency measured in a window of steady load, not over a finite trace.

Replaying a finite trace at a rising rate turns it into an offline burst once the rate is high
enough (the whole trace arrives before much of it is served), so its capacities are lower
bounds. Here (DESIGN.md, "Measuring at steady state"):

- Trace: `SteadyConfig.total_programs(r)` = warm-up + window + tail programs of the
  workload, generated per seed at `BASE_RATE` (1 program/s) and retimed to each rate
  (`bench.analysis.capacity.retimed`): every rate sees the same programs in the same arrival
  pattern (a workload generator lists its programs in arrival order, and the first n of a
  longer trace of the same seed are the trace of n: `TracePrefixes`).
- Window: the programs arriving in [warmup, warmup + window) seconds at the base rate, that is
  in [warmup / r, (warmup + window) / r) seconds at rate r: about `window_programs` programs
  (`measured_ids`). Only they are measured. The warm-up fills the system first; the tail keeps
  programs arriving after the window. Warm-up and tail are set in programs (the same programs
  measured at every rate) or in seconds (`warmup_seconds`, `tail_seconds`: round(seconds x r)
  programs at rate r). Seconds compare setups of different capacities (1 against 8 replicas)
  on equal terms: near capacity a system needs a warm-up of several program lifetimes (a
  time, not a count), and a warm-up fixed in programs is shorter in seconds at a higher rate.
- Early stop: the run ends once every measured program has finished and the clock has
  reached the window's end (`bench.sim.simulate.EarlyStop`; without the second condition a
  light load whose last measured program finishes before the next arrival would stop with
  no backlog growth to judge); the programs still running then are cut. Until then
  arrivals continue, so the measured programs run under steady load, and their times are
  exactly those of a run to the end of the trace. The tail is long (4 windows by default)
  since it costs only its generation when the point drains.
- Overload: a point is overloaded (`Verdict`) when
  (a) its backlog grows (`BacklogWatch`, checked while the run goes on, which stops it there):
  the number of programs in the system (arrived, not finished) grows over the window by more
  than `max_backlog_growth` of the programs arriving in it (measured as twice the difference
  of its time averages over the window's two halves, which is the growth for a linear trend),
  or it exceeds `SteadyConfig.max_in_system` (warm-up + window programs: by Little's law a
  steady system holding that many has a mean latency longer than warm-up and window
  together, too long for the window to measure);
  (b) a measured program has not finished when the tail's last program arrives (the run stops
  there, since past it the load would no longer be steady).
  Past capacity the backlog grows by (1 - served rate / arrival rate) of the arrivals: the
  default 0.2 flags a rate 25% or more past capacity (and, with a warm-up too short for the
  workload, a system still filling up: on ShareGPT, whose conversations last up to a few
  minutes, 200 programs of warm-up left the backlog growing by 0.07-0.15 at 6-7/s where 600
  gave -0.09 and -0.03, hence the default of 600). The mean normalized latency of the
  window's halves (by arrival) is reported beside it. An overloaded point misses every target
  (`bench.analysis.sweep.meets_target`) and reports print "overloaded" instead of its latency.
- Warm-up check: a backlog verdict also says when the warm-up (in seconds at the rate) was
  shorter than twice the mean time in system over the window (Little's law: the window's
  mean backlog / rate, `BacklogWatch.time_in_system`): such a system may still have been
  filling rather than overloaded, and wants a longer warm-up (`SteadyPoint.warm_enough`).
- Capacity: per seed, `bench.analysis.capacity.search` (bracket and bisect) for each policy and
  target, on the mean normalized latency over the measured programs; the capacity is
  `bench.analysis.sweep.capacity` of that seed's points, and its spread over seeds (min / median /
  max) is the confidence figure (`spread`). Reports: `bench.analysis.steady_report`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Sequence

from tqdm import tqdm

from bench.analysis.capacity import (BASE_RATE, MAX_EXPANSIONS, retimed, run_searches,
                                     search_policies)
from bench.analysis.sweep import SweepPoint, capacity, generate_trace, simulate_trace, summarize
from bench.sim.arrivals import POISSON, ArrivalProcess, retime
from bench.sim.metrics import ProgramRecord, compute_metrics
from bench.sim.multi_sim import DEFAULT_CUTOFF, replica_options
from bench.sim.simulate import EarlyStop, SimResult
from bench.sim.trace import Trace

DEFAULT_WARMUP_PROGRAMS = 600
DEFAULT_WINDOW_PROGRAMS = 600
DEFAULT_TAIL_PROGRAMS = 2400
DEFAULT_MAX_BACKLOG_GROWTH = 0.2
DEFAULT_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Window:
    """The measurement window in virtual seconds: arrivals in [start, end) are measured."""

    start: float
    end: float

    def __contains__(self, arrival: float) -> bool:
        return self.start <= arrival < self.end


@dataclass(frozen=True)
class SteadyConfig:
    """Warm-up, window and tail in programs at the rate being tested (converted to seconds by
    `window`), and the backlog growth over the window, as a fraction of the window's
    programs, past which a point is overloaded (`inf` turns that test off). `warmup_seconds`
    and `tail_seconds`, when given, replace `warmup_programs` and `tail_programs`: at rate r
    the warm-up is round(warmup_seconds x r) programs and the tail round(tail_seconds x r),
    at least 1."""

    warmup_programs: int = DEFAULT_WARMUP_PROGRAMS
    window_programs: int = DEFAULT_WINDOW_PROGRAMS
    tail_programs: int = DEFAULT_TAIL_PROGRAMS
    max_backlog_growth: float = DEFAULT_MAX_BACKLOG_GROWTH
    warmup_seconds: float | None = None
    tail_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.warmup_programs < 0:
            raise ValueError(f"warmup_programs: must be >= 0, got {self.warmup_programs}")
        if self.window_programs < 1:
            raise ValueError(f"window_programs: must be >= 1, got {self.window_programs}")
        if self.tail_programs < 1:
            raise ValueError(f"tail_programs: must be >= 1, got {self.tail_programs}")
        if not self.max_backlog_growth > 0:
            raise ValueError(f"max_backlog_growth: must be > 0, got {self.max_backlog_growth}")
        for name in ("warmup_seconds", "tail_seconds"):
            seconds = getattr(self, name)
            if seconds is not None and not 0 <= seconds < math.inf:
                raise ValueError(f"{name}: must be >= 0 and finite, got {seconds}")

    def warmup_at(self, rate: float) -> int:
        """Programs arriving before the window at `rate` programs/s."""
        if self.warmup_seconds is None:
            return self.warmup_programs
        return round(self.warmup_seconds * _checked(rate))

    def tail_at(self, rate: float) -> int:
        """Programs arriving after the window at `rate` programs/s (at least 1)."""
        if self.tail_seconds is None:
            return self.tail_programs
        return max(1, round(self.tail_seconds * _checked(rate)))

    def total_programs(self, rate: float) -> int:
        """Programs of the trace at `rate`: warm-up + window + tail."""
        return self.warmup_at(rate) + self.window_programs + self.tail_at(rate)

    def max_in_system(self, rate: float) -> int:
        """Programs in the system past which a run at `rate` is overloaded: warm-up +
        window."""
        return self.warmup_at(rate) + self.window_programs

    def window(self, rate: float, timed_at: float | None = None) -> Window:
        """The window of the point at `rate` programs/s, in seconds of a trace timed at
        `timed_at` programs/s (default `rate`): [w / t, (w + window) / t), w =
        `warmup_at(rate)`."""
        warmup, clock = self.warmup_at(rate), _checked(rate if timed_at is None else timed_at)
        return Window(warmup / clock, (warmup + self.window_programs) / clock)


def _checked(rate: float) -> float:
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"rate: must be positive and finite, got {rate}")
    return rate


class TracePrefixes:
    """One seed's trace of a workload at `BASE_RATE`, programs arriving by `arrivals`, as
    long as asked: `first(n)` is the trace of the first n programs, generated once and again
    only when a longer one is asked for (a generator's first n programs, and an arrival
    process's first n times, do not depend on how many follow)."""

    def __init__(self, workload: str, seed: int, arrivals: ArrivalProcess = POISSON) -> None:
        self.workload, self.seed, self.arrivals = workload, seed, arrivals
        self._trace = Trace(())

    def first(self, n: int) -> Trace:
        if len(self._trace.programs) < n:
            self._trace = retime(generate_trace(self.workload, n, self.seed, BASE_RATE),
                                 self.arrivals, BASE_RATE, self.seed)
        if len(self._trace.programs) == n:
            return self._trace
        return Trace(self._trace.programs[:n])


class Verdict(enum.Enum):
    """Whether a point ran at steady state (see the module docstring)."""

    STEADY = "steady"
    BACKLOG = "backlog grows"  # (a)
    UNDRAINED = "did not drain"  # (b)


class BacklogWatch:
    """An `EarlyStop.watch`: integrates the backlog (programs in the system, constant between
    two calls) over each half of `window`. Trips, and stays tripped, when the backlog exceeds
    `limit`, or when the clock first reaches the window's end with `growth` above
    `max_growth`. `growth`: 2 x (second half's mean backlog - first half's) / `programs`
    (the programs arriving in the window), set when the clock reaches the window's end (NaN
    before)."""

    def __init__(self, window: Window, programs: int, limit: int, max_growth: float) -> None:
        self.window, self.programs = window, programs
        self.limit, self.max_growth = limit, max_growth
        self.middle = (window.start + window.end) / 2
        self.halves = [0.0, 0.0]  # backlog x seconds
        self.last_time, self.last_backlog = 0.0, 0
        self.growth = math.nan
        self.tripped = False

    def __call__(self, now: float, backlog: int) -> bool:
        now = max(now, self.last_time)
        for half, (lo, hi) in enumerate(((self.window.start, self.middle),
                                         (self.middle, self.window.end))):
            overlap = min(now, hi) - max(self.last_time, lo)
            if overlap > 0:
                self.halves[half] += overlap * self.last_backlog
        if math.isnan(self.growth) and now >= self.window.end:
            half_seconds = self.middle - self.window.start
            self.growth = 2 * (self.halves[1] - self.halves[0]) / half_seconds / self.programs
            self.tripped = self.tripped or self.growth > self.max_growth
        self.last_time, self.last_backlog = now, backlog
        self.tripped = self.tripped or backlog > self.limit
        return self.tripped

    def time_in_system(self, rate: float) -> float:
        """Little's law over the part of the window seen so far: its time-averaged backlog /
        the arrival `rate` (NaN before the window)."""
        covered = min(self.last_time, self.window.end) - self.window.start
        if covered <= 0:
            return math.nan
        return (self.halves[0] + self.halves[1]) / covered / rate


@dataclass(frozen=True)
class SteadyPoint:
    """One (seed, policy, rate) run. `window` is in seconds at this rate; `measured` programs
    arrived in it. `first_half` / `second_half`: mean normalized latency of the measured
    programs by arrival (the first `measured // 2`, then the rest); NaN when not every
    measured program finished or the point is overloaded. `backlog_growth`:
    `BacklogWatch.growth` (NaN if the run stopped before the window's end). `point` summarizes
    the measured programs (`num_programs` = `measured`; counters are the run's up to its
    stop) and is `overloaded` unless the verdict is `STEADY`. `time_in_system`:
    `BacklogWatch.time_in_system` at the stop (NaN if unknown)."""

    seed: int
    window: Window
    measured: int
    first_half: float
    second_half: float
    backlog_growth: float
    verdict: Verdict
    point: SweepPoint
    time_in_system: float = math.nan

    @property
    def warm_enough(self) -> bool:
        """The warm-up lasted at least twice the mean time in system (True when unknown)."""
        return not self.window.start < 2 * self.time_in_system


def measured_ids(trace: Trace, window: Window) -> frozenset[str]:
    """The ids of the programs of `trace` arriving in `window` (ValueError if none does)."""
    ids = frozenset(p.program_id for p in trace.programs if p.arrival in window)
    if not ids:
        raise ValueError(f"window: no program arrives in [{window.start:g}, {window.end:g}) s")
    return ids


def half_means(records: Sequence[ProgramRecord]) -> tuple[float, float]:
    """Mean normalized latency of the first `len // 2` records by arrival (ties: in the given
    order) and of the rest; (NaN, NaN) for fewer than two records."""
    if len(records) < 2:
        return math.nan, math.nan
    ordered = sorted(records, key=lambda r: r.arrival)
    middle = len(ordered) // 2
    return (compute_metrics(ordered[:middle]).mean_norm_latency,
            compute_metrics(ordered[middle:]).mean_norm_latency)


def judge(finished: int, measured: int, backlog_grew: bool) -> Verdict:
    """The verdict on a run of which `finished` of the `measured` programs finished before it
    stopped: BACKLOG if its `BacklogWatch` tripped (`backlog_grew`), UNDRAINED if some
    measured program did not finish, else STEADY."""
    if backlog_grew:
        return Verdict.BACKLOG
    return Verdict.UNDRAINED if finished < measured else Verdict.STEADY


def run_steady_point(workload: str, base: Trace, seed: int, policy: str, rate: float,
                     config: SteadyConfig, preset: str = "a100-80g",
                     model: str = "llama-3.1-8b",
                     multi: dict[str, Any] | None = None,
                     engine_overrides: dict[str, Any] | None = None) -> SteadyPoint:
    """`steady_run`'s point alone."""
    return steady_run(workload, base, seed, policy, rate, config, preset, model, multi,
                      engine_overrides).point


@dataclass(frozen=True)
class SteadyRun:
    """A judged point (`point`) with the run behind it (`result`: every program it finished)
    and the ids of the programs it measured (`measured`)."""

    point: SteadyPoint
    result: SimResult
    measured: frozenset[str]


def steady_run(workload: str, base: Trace, seed: int, policy: str, rate: float,
               config: SteadyConfig, preset: str = "a100-80g", model: str = "llama-3.1-8b",
               multi: dict[str, Any] | None = None,
               engine_overrides: dict[str, Any] | None = None) -> SteadyRun:
    """Simulate the first `config.total_programs(rate)` programs of `base` (generated at
    `BASE_RATE` with `seed`; ValueError if it has fewer) retimed to `rate` under `policy`
    (with `engine_overrides` on its engine config; on the replicas of `multi`,
    `bench.sim.multi_sim.replica_options`, when given) until every
    program of the window has finished, the last program has arrived or the backlog grows
    (`BacklogWatch`), and judge it."""
    needed = config.total_programs(rate)
    if len(base.programs) < needed:
        raise ValueError(f"base: {len(base.programs)} programs, {needed} needed at {rate:g}/s")
    if len(base.programs) > needed:
        base = Trace(base.programs[:needed])
    trace = retimed(base, rate)
    measured = measured_ids(base, config.window(rate, timed_at=BASE_RATE))
    window = config.window(rate)
    watch = BacklogWatch(window, len(measured), config.max_in_system(rate),
                         config.max_backlog_growth)
    stop = EarlyStop(measured, deadline=max(p.arrival for p in trace.programs), watch=watch,
                     not_before=window.end)
    result = simulate_trace(trace, policy, preset, model, multi or {}, stop, engine_overrides)
    finished = [p for p in result.programs if p.program_id in measured]
    verdict = judge(len(finished), len(measured), watch.tripped)
    first, second = (half_means(finished) if verdict is Verdict.STEADY
                     else (math.nan, math.nan))
    point = summarize(workload, policy, rate, result, len(measured), measured,
                      overloaded=verdict is not Verdict.STEADY)
    judged = SteadyPoint(seed, window, len(measured), first, second, watch.growth, verdict,
                         point, watch.time_in_system(rate))
    return SteadyRun(judged, result, measured)


def find_steady_capacities(workload: str, policies: Sequence[str], targets: Sequence[float],
                           seeds: Sequence[int], config: SteadyConfig, start_rate: float,
                           iterations: int = 3, preset: str = "a100-80g",
                           model: str = "llama-3.1-8b", progress: bool = True,
                           replicas: int = 1, placement: str | None = None,
                           cutoff: int | str = DEFAULT_CUTOFF,
                           placement_options: dict | None = None, kv_events: bool = False,
                           replica_speeds: Sequence[float] | None = None,
                           engine_overrides: dict[str, Any] | None = None,
                           max_expansions: int = MAX_EXPANSIONS,
                           arrivals: ArrivalProcess = POISSON,
                           jobs: int = 1) -> list[SteadyPoint]:
    """For each seed, one trace (`TracePrefixes`: `SteadyConfig.total_programs` at each
    rate, programs arriving by `arrivals`) and
    `bench.analysis.capacity.search_policies` over it with `run_steady_point`: every (policy, rate)
    pair run once per seed (on the replicas of `bench.sim.multi_sim.replica_options` when
    `replicas` > 1 or a `placement` is named), with `engine_overrides` on every engine's
    config. `jobs`: how many (seed, policy) searches run at once, each in a worker process
    with its own copy of the seed's trace (`bench.analysis.parallel_runs`: the same points
    whatever `jobs`). Returns the points seed by seed, policy by policy, in the order run."""
    if not seeds:
        raise ValueError("seeds: must not be empty")
    multi = replica_options(replicas, placement, cutoff, placement_options, kv_events,
                            replica_speeds)
    with tqdm(desc=f"steady capacity {workload}", unit="run", disable=not progress) as bar:
        return run_searches(lambda here: (
            (_steady_search, (workload, seed, policy, traces, targets, config, start_rate,
                              iterations, preset, model, multi, engine_overrides,
                              max_expansions, here))
            for seed in seeds for traces in [TracePrefixes(workload, seed, arrivals)]
            for policy in policies), jobs, bar)


def _steady_search(workload: str, seed: int, policy: str, traces: TracePrefixes,
                   targets: Sequence[float], config: SteadyConfig, start_rate: float,
                   iterations: int, preset: str, model: str, multi: dict[str, Any],
                   engine_overrides: dict[str, Any] | None, max_expansions: int,
                   bar: tqdm | None) -> list[SteadyPoint]:
    """One policy's `search_policies` on one seed's `traces` (a job of
    `find_steady_capacities`); `bar`, run here, shows the seed and counts the runs."""
    runs: list[SteadyPoint] = []
    if bar is not None:
        bar.set_description(f"steady capacity {workload} seed {seed}")

    def point_at(policy: str, rate: float) -> SweepPoint:
        base = traces.first(config.total_programs(rate))
        runs.append(run_steady_point(workload, base, seed, policy, rate, config, preset, model,
                                     multi, engine_overrides))
        return runs[-1].point

    search_policies([policy], targets, point_at, start_rate, iterations, bar, max_expansions)
    return runs


def seed_capacities(runs: Sequence[SteadyPoint], policy: str,
                    target: float) -> dict[int, float | None]:
    """`policy`'s capacity at `target` per seed (`bench.analysis.sweep.capacity` of that seed's
    points; None where its lowest rate run missed), seeds in first-run order."""
    seeds = list(dict.fromkeys(r.seed for r in runs))
    return {seed: capacity([r.point for r in runs if r.seed == seed], policy, target)
            for seed in seeds}


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    """(min, median, max) of `values`, None counting as below every number (a capacity under
    the lowest rate run); the median of an even count is the lower middle value."""
    if not values:
        raise ValueError("values: must not be empty")
    ordered = sorted(values, key=lambda v: -math.inf if v is None else v)
    return ordered[0], ordered[(len(ordered) - 1) // 2], ordered[-1]
