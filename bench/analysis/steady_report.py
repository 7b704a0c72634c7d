"""Reports of a steady-state capacity search (`bench.analysis.steady_state`): the window, each
policy's capacity per target with its spread over seeds, every run, and the latency plot.

- `window_text`: the window in programs and seconds and how many programs each seed measured;
- `steady_capacity_table`: per policy the capacity of every seed, their min / median / max,
  and the median's ratio to each of `RATIO_BASELINES` that was run;
- `steady_points_table`: one row per run, "overloaded" (and why) in place of a latency;
- `write_steady_outputs`: `capacity_<workload>.md` and `.png`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from bench.analysis.capacity import BASE_RATE, LatencyTarget
from bench.analysis.steady_state import SteadyConfig, SteadyPoint, Verdict, seed_capacities, spread
from bench.analysis.sweep_report import RATIO_BASELINES, plot_latency, workload_of


def _policies(runs: Sequence[SteadyPoint]) -> list[str]:
    return list(dict.fromkeys(r.point.policy for r in runs))


def _seeds(runs: Sequence[SteadyPoint]) -> list[int]:
    return list(dict.fromkeys(r.seed for r in runs))


def window_text(config: SteadyConfig, runs: Sequence[SteadyPoint]) -> str:
    """One paragraph: warm-up, window and tail (in programs, or in seconds at rate r), the
    window in seconds at rate r, the programs measured per seed (per run when the warm-up is
    in seconds: the table of runs), and the overload rule."""
    measured = {r.seed: r.measured for r in runs}
    counts = ", ".join(f"seed {seed}: {count}" for seed, count in measured.items())
    window, tail = config.window_programs, config.tail_programs
    if config.tail_seconds is not None:
        tail = f"{config.tail_seconds:g} s of arrivals"
    if config.warmup_seconds is None:
        start = config.window(BASE_RATE)
        if config.tail_seconds is None:  # every count fixed: the trace's size too
            head = (f"{config.total_programs(BASE_RATE)} programs per seed (warm-up "
                    f"{config.warmup_programs}, window {window}, tail {tail})")
        else:
            head = f"warm-up {config.warmup_programs} programs, window {window}, tail {tail}"
        span = f"[{start.start:g}/r, {start.end:g}/r) s at rate r ({counts} programs)"
        limit = f"{config.max_in_system(BASE_RATE)}"
    else:
        seconds = config.warmup_seconds
        head = (f"warm-up {seconds:g} s of arrivals (w = round({seconds:g} x r) programs at "
                f"rate r), window {window} programs, tail {tail}")
        span = f"[w/r, (w + {window})/r) s at rate r (per run: below)"
        limit = f"w + {window}"
    return (f"Steady state: {head}; measured: the programs arriving in {span}. A point "
            f"is overloaded when the backlog (programs in the system) grows over the window by "
            f"more than {config.max_backlog_growth:g} of the window's programs or passes "
            f"{limit}, or when a measured program is unfinished at the last arrival.\n")


def _capacity_cell(runs: Sequence[SteadyPoint], policy: str, seed: int,
                   value: float | None) -> str:
    """A seed's capacity: `< r` below the lowest rate run, `*` at the highest (may be more)."""
    rates = [r.point.rate for r in runs if r.seed == seed and r.point.policy == policy]
    if value is None:
        return f"< {min(rates):.3g}"
    return f"{value:.3g}" + ("*" if value == max(rates) else "")


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def steady_capacity_table(runs: Sequence[SteadyPoint], target: float) -> str:
    """Markdown: per policy its capacity at `target` per seed, their min / median / max
    (`spread`) and the median over each run baseline's median. `< r`: the lowest rate run
    already missed; `*`: the highest rate run met the target (the capacity may be higher)."""
    policies = _policies(runs)
    caps = {policy: seed_capacities(runs, policy, target) for policy in policies}
    spreads = {policy: spread(list(caps[policy].values())) for policy in policies}
    baselines = [b for b in RATIO_BASELINES if b in caps]
    header = (["policy", "capacity median (programs/s)", "min", "max", "per seed"]
              + [f"vs {b}" for b in baselines])
    lines = [f"Capacity at steady state: the arrival rate at which the mean normalized latency "
             f"of the measured programs reaches {target:.4f} s/token (overloaded rates miss "
             f"it), over {len(_seeds(runs))} seed(s)", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for policy in policies:
        by_seed = {seed: _capacity_cell(runs, policy, seed, value)
                   for seed, value in caps[policy].items()}
        per_seed = ", ".join(f"{seed}: {text}" for seed, text in by_seed.items())
        cell = {value: by_seed[seed]  # the cell of a value's first seed
                for seed, value in reversed(caps[policy].items())}
        median = spreads[policy][1]
        row = [policy, *(cell[v] for v in (median, spreads[policy][0], spreads[policy][2])),
               per_seed] + [_ratio(median, spreads[b][1]) for b in baselines]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _verdict_cell(run: SteadyPoint) -> str:
    growth = "" if math.isnan(run.backlog_growth) else f", backlog {run.backlog_growth:+.2f}"
    if run.verdict is Verdict.BACKLOG:
        short = "" if run.warm_enough else (
            f"; warm-up {run.window.start:.0f} s < 2 x time in system "
            f"{run.time_in_system:.0f} s: may still be filling")
        return (f"overloaded: backlog grows ({run.point.programs_completed}/{run.measured} "
                f"done at the stop{growth}{short})")
    if run.verdict is Verdict.UNDRAINED:
        return (f"overloaded: did not drain ({run.point.programs_completed}/{run.measured} "
                f"done at the last arrival{growth})")
    return f"steady{growth}"


def steady_points_table(runs: Sequence[SteadyPoint]) -> str:
    """Markdown, one row per run (seeds, then policies in first-run order, rates ascending):
    the window in seconds, programs measured and finished, normalized latency mean / P95 /
    P99 ("overloaded" for an overloaded point), the mean of each half of them by arrival, the
    verdict with the backlog growth (a fraction of the window's programs), TTFT P50 / P99 and
    the P99 inter-token gap of the measured programs' calls, simulation wall time."""
    seeds = {seed: i for i, seed in enumerate(_seeds(runs))}
    policies = {policy: i for i, policy in enumerate(_policies(runs))}
    header = ["seed", "policy", "rate (programs/s)", "window (s)", "measured", "done",
              "mean / P95 / P99 (s/token)", "halves (s/token)", "verdict", "TTFT P50 / P99 (s)",
              "ITL P99 (s)", "sim seconds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for run in sorted(runs, key=lambda r: (seeds[r.seed], policies[r.point.policy],
                                           r.point.rate)):
        p = run.point
        latency = ("overloaded" if p.overloaded else f"{p.mean_norm_latency:.4f} / "
                   f"{p.p95_norm_latency:.4f} / {p.p99_norm_latency:.4f}")
        halves = ("-" if math.isnan(run.first_half)
                  else f"{run.first_half:.4f} / {run.second_half:.4f}")
        row = [str(run.seed), p.policy, f"{p.rate:.3g}",
               f"[{run.window.start:.1f}, {run.window.end:.1f})", str(run.measured),
               str(p.programs_completed), latency, halves, _verdict_cell(run),
               f"{p.ttft_p50_s:.3f} / {p.ttft_p99_s:.3f}", f"{p.itl_p99_s:.4f}",
               f"{p.sim_wall_seconds:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def write_steady_outputs(runs: Sequence[SteadyPoint], targets: Sequence[LatencyTarget],
                         config: SteadyConfig, out_dir: str | Path,
                         command: str) -> tuple[Path, Path]:
    """Write `capacity_<workload>.md` (command, window, targets, a capacity table per target,
    every run) and `capacity_<workload>.png` (the first seed's steady points: latency against
    rate per policy, each target dashed) into `out_dir`; returns their paths."""
    workload = workload_of([r.point for r in runs])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = out / f"capacity_{workload}.md", out / f"capacity_{workload}.png"
    described = [f"{t.seconds_per_token:.4f} s/token ({t.how})" for t in targets]
    parts = [f"# Steady-state capacity: {workload}", "", "```", command, "```", "",
             window_text(config, runs), "Latency targets: " + "; ".join(described), ""]
    for target, text in zip(targets, described):
        parts += [f"## Target {text}", "", steady_capacity_table(runs, target.seconds_per_token)]
    parts += ["## Every run", "", steady_points_table(runs)]
    md_path.write_text("\n".join(parts))
    first = _seeds(runs)[0]
    plot_latency([r.point for r in runs if r.seed == first],
                 [t.seconds_per_token for t in targets], png_path,
                 f"{workload} at steady state (seed {first}): latency against rate")
    return md_path, png_path
