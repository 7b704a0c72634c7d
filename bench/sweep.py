"""Rate sweep: every policy at every arrival rate on one workload, in the simulator.

For each rate the trace is generated once (same seed, so the same programs; only the arrival
times scale with the rate) and replayed under every policy, so the policies see identical input.

A policy's *capacity* is the arrival rate at which its mean normalized latency reaches a latency
target: interpolated between the last swept rate that meets it and the first that misses. The
target is fixed per workload and preset: `TARGET_FACTOR` times the mean normalized latency of the `vllm` baseline on that workload
at `UNLOADED_RATE` (programs arrive so rarely that they barely overlap), so it does not depend on
the rates swept or on the policies compared.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from tqdm import tqdm

from bench.metrics import compute_metrics
from bench.simulate import simulate
from bench.trace import Trace

TARGET_FACTOR = 5.0
UNLOADED_RATE = 0.01  # programs/s: an unloaded system for the latency target
TARGET_PROGRAMS = 20  # at most this many programs for the target run (it only needs a mean)
RATIO_BASELINES = ("vllm", "optimized", "mlfq")


@dataclass(frozen=True)
class SweepPoint:
    """One (policy, rate) run; latencies are normalized (seconds per generated token)."""

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
    sim_wall_seconds: float

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def generate_trace(workload: str, num_programs: int, seed: int, rate: float) -> Trace:
    generator = importlib.import_module(f"bench.workloads.{workload}")
    return generator.generate(num_programs, seed, rate)


def sweep(workload: str, policies: Sequence[str], rates: Sequence[float], num_programs: int,
          seed: int, preset: str = "a100-80g", model: str = "llama-3.1-8b",
          progress: bool = True) -> list[SweepPoint]:
    """Simulate every policy at every rate; returns the points in (rate, policy) order."""
    if not policies:
        raise ValueError("policies: must not be empty")
    if not rates:
        raise ValueError("rates: must not be empty")
    points: list[SweepPoint] = []
    bar = tqdm(total=len(policies) * len(rates), desc=f"sweep {workload}", unit="run",
               disable=not progress)
    try:
        for rate in rates:
            trace = generate_trace(workload, num_programs, seed, rate)
            for policy in policies:
                bar.set_postfix_str(f"{policy} @ {rate:g}/s")
                points.append(run_point(workload, trace, policy, rate, preset, model))
                bar.update(1)
    finally:
        bar.close()
    return points


def run_point(workload: str, trace: Trace, policy: str, rate: float,
              preset: str = "a100-80g", model: str = "llama-3.1-8b") -> SweepPoint:
    """Simulate `trace` (arriving at `rate`) under `policy` and summarize it."""
    result = simulate(trace, policy, preset=preset, model=model)
    m = compute_metrics(result.programs)
    return SweepPoint(
        workload=workload, policy=policy, rate=rate, num_programs=len(trace.programs),
        programs_completed=m.programs_completed, mean_norm_latency=m.mean_norm_latency,
        p95_norm_latency=m.p95_norm_latency, p99_norm_latency=m.p99_norm_latency,
        throughput_tokens_per_s=m.throughput_tokens_per_s, makespan_s=m.makespan_s,
        sim_wall_seconds=result.wall_seconds)


def latency_target(workload: str, preset: str = "a100-80g", model: str = "llama-3.1-8b",
                   seed: int = 0, num_programs: int = TARGET_PROGRAMS) -> float:
    """`TARGET_FACTOR` x the mean normalized latency of `vllm` on `workload` at `UNLOADED_RATE`
    (with at most `TARGET_PROGRAMS` programs, which is enough for an unloaded mean)."""
    n = max(1, min(num_programs, TARGET_PROGRAMS))
    trace = generate_trace(workload, n, seed, UNLOADED_RATE)
    metrics = compute_metrics(simulate(trace, "vllm", preset=preset, model=model).programs)
    if metrics.programs_completed == 0:
        raise RuntimeError(f"latency target: no {workload} program completed under vllm")
    return TARGET_FACTOR * metrics.mean_norm_latency


# ----- capacity --------------------------------------------------------------------------------
def meets_target(point: SweepPoint, target: float) -> bool:
    """Every program completed and the mean normalized latency within `target`."""
    return (point.programs_completed >= point.num_programs
            and not math.isnan(point.mean_norm_latency)
            and point.mean_norm_latency <= target)


def capacity(points: Iterable[SweepPoint], policy: str, target: float) -> float | None:
    """The arrival rate at which `policy`'s mean normalized latency reaches `target`.

    Walks the swept rates upwards while each meets the target (mean <= target and every
    program completed). At the first rate that misses it, the crossing is interpolated
    linearly in log(rate) against log(latency) from the last meeting rate (no interpolation
    towards a run that did not complete: the last meeting rate is returned). All swept rates
    meeting: the highest. None if the lowest swept rate misses or the policy was not swept."""
    own = sorted((p for p in points if p.policy == policy), key=lambda p: p.rate)
    best: SweepPoint | None = None
    for point in own:
        if meets_target(point, target):
            best = point
            continue
        if best is None:
            return None
        if point.programs_completed < point.num_programs or \
                not point.mean_norm_latency > best.mean_norm_latency > 0:
            return best.rate
        fraction = (math.log(target / best.mean_norm_latency)
                    / math.log(point.mean_norm_latency / best.mean_norm_latency))
        return best.rate * (point.rate / best.rate) ** fraction
    return best.rate if best else None


def _policies(points: Sequence[SweepPoint]) -> list[str]:
    return list(dict.fromkeys(p.policy for p in points))


def _rates(points: Sequence[SweepPoint]) -> list[float]:
    return sorted({p.rate for p in points})


def _ratio(a: float | None, b: float | None, b_floor: float) -> str:
    """`a / b`; when `b` missed the target at every swept rate (None), a lower bound
    `> a / b_floor` with `b_floor` its lowest swept rate."""
    if a is None:
        return "-"
    if b is None:
        return f"> {a / b_floor:.2f}x"
    return f"{a / b:.2f}x"


def capacity_table(points: Sequence[SweepPoint], target: float) -> str:
    """Markdown: each policy's capacity (interpolated, see `capacity`) and its ratio to vllm,
    optimized and mlfq (where those were swept), then oracle's capacity over atlas's. A
    capacity marked `*` is the highest rate swept (the true capacity may be higher, so ratios
    involving it are bounds); `< r` means the lowest swept rate `r` already missed."""
    if points and all(math.isinf(p.rate) for p in points):
        return "Capacity: not defined for an offline run (every program arrives at once)\n"
    policies = _policies(points)
    top = max(p.rate for p in points) if points else None
    caps = {policy: capacity(points, policy, target) for policy in policies}
    lowest = {policy: min(p.rate for p in points if p.policy == policy) for policy in policies}
    baselines = [b for b in RATIO_BASELINES if b in caps]
    header = ["policy", "capacity (programs/s)"] + [f"vs {b}" for b in baselines]
    lines = [f"Capacity: arrival rate at which the mean normalized latency reaches "
             f"{target:.4f} s/token", "",
             "| " + " | ".join(header) + " |",
             "|" + "|".join(" --- " for _ in header) + "|"]
    for policy in policies:
        cap = caps[policy]
        if cap is None:
            cell = f"< {lowest[policy]:g}"
        else:
            cell = f"{cap:.3g}" + ("*" if cap == top else "")
        row = [policy, cell] + [_ratio(cap, caps[b], lowest[b]) for b in baselines]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if "oracle" in caps and "atlas" in caps:
        lines.append(f"Gap to the oracle (oracle capacity / atlas capacity): "
                     f"{_ratio(caps['oracle'], caps['atlas'], lowest['atlas'])}")
    else:
        lines.append("Gap to the oracle: - (needs both oracle and atlas)")
    if any(cap is not None and cap == top for cap in caps.values()):
        lines.append("")
        lines.append("`*`: met the target at the highest swept rate; the capacity may be higher.")
    return "\n".join(lines) + "\n"


def latency_table(points: Sequence[SweepPoint]) -> str:
    """Markdown: policy x rate, each cell `mean / P95 / P99` normalized latency (s/token), then
    policy x rate tables of throughput and makespan."""
    policies, rates = _policies(points), _rates(points)
    by_key = {(p.policy, p.rate): p for p in points}
    header = ["policy"] + [f"{r:g}/s" for r in rates]
    sep = "|" + "|".join(" --- " for _ in header) + "|"

    def cell(policy: str, rate: float, fmt) -> str:
        point = by_key.get((policy, rate))
        if point is None:
            return "-"
        text = fmt(point)
        if point.programs_completed < point.num_programs:
            text += f" ({point.programs_completed}/{point.num_programs} done)"
        return text

    lines = ["Normalized latency (s/token), mean / P95 / P99", "",
             "| " + " | ".join(header) + " |", sep]
    for policy in policies:
        cells = [cell(policy, r, lambda p: f"{p.mean_norm_latency:.4f} / "
                      f"{p.p95_norm_latency:.4f} / {p.p99_norm_latency:.4f}") for r in rates]
        lines.append("| " + " | ".join([policy] + cells) + " |")
    lines += ["", "Throughput (generated tokens/s)", "", "| " + " | ".join(header) + " |", sep]
    for policy in policies:
        cells = [cell(policy, r, lambda p: f"{p.throughput_tokens_per_s:.1f}") for r in rates]
        lines.append("| " + " | ".join([policy] + cells) + " |")
    lines += ["", "Makespan (s, first arrival to last finish)", "",
              "| " + " | ".join(header) + " |", sep]
    for policy in policies:
        cells = [cell(policy, r, lambda p: f"{p.makespan_s:.1f}") for r in rates]
        lines.append("| " + " | ".join([policy] + cells) + " |")
    return "\n".join(lines) + "\n"


# ----- outputs ---------------------------------------------------------------------------------
def _workload(points: Sequence[SweepPoint]) -> str:
    names = {p.workload for p in points}
    if len(names) != 1:
        raise ValueError(f"points: expected one workload, got {sorted(names)}")
    return names.pop()


def write_outputs(points: Sequence[SweepPoint], target: float, out_dir: str | Path,
                  command: str | None = None) -> tuple[Path, Path]:
    """Write `sweep_<workload>.md` (target, latency and throughput tables, capacity table) and
    `sweep_<workload>.png` (mean normalized latency against rate, log y, target dashed) into
    `out_dir`; returns their paths."""
    workload = _workload(points)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = out / f"sweep_{workload}.md", out / f"sweep_{workload}.png"

    parts = [f"# Rate sweep: {workload}", ""]
    if command:
        parts += ["```", command, "```", ""]
    parts += [f"Latency target: {target:.4f} s/token ({TARGET_FACTOR:g} x vllm's mean at "
              f"{UNLOADED_RATE:g} programs/s)", "", latency_table(points), capacity_table(points, target)]
    md_path.write_text("\n".join(parts))

    plot_latency(points, target, png_path, f"{workload}: latency against rate")
    return md_path, png_path


def plot_latency(points: Sequence[SweepPoint], target: float, path: Path, title: str) -> None:
    """PNG: mean normalized latency against rate, one line per policy, log y, target dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        for policy in _policies(points):
            own = sorted((p for p in points if p.policy == policy and p.mean_norm_latency > 0),
                         key=lambda p: p.rate)
            if own:
                ax.plot([p.rate for p in own], [p.mean_norm_latency for p in own],
                        marker="o", label=policy)
        ax.axhline(target, linestyle="--", color="gray", label="target")
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate (programs/s)")
        ax.set_ylabel("mean normalized latency (s/token)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
