"""Reports of sweep points (a rate sweep's or a capacity search's): markdown tables, the sweep's
files and the latency plot.

- `capacity_table`: each policy's capacity at one latency target and its ratios to the
  `RATIO_BASELINES` that were run, then the gap to the oracle;
- `latency_table`: policy x rate tables of latency, throughput, makespan, time to first token
  and prefill tokens computed;
- `points_table`: one row per run.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Sequence

from bench.analysis.sweep import TARGET_FACTOR, UNLOADED_RATE, SweepPoint, capacity

# Ratio columns, where run: the paper's baselines and the two memory ablations.
RATIO_BASELINES = ("vllm", "optimized", "optimized-mem", "mlfq", "atlas-lru")


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
    """Markdown: each policy's capacity (interpolated, see `bench.analysis.sweep.capacity`) and its
    ratio to each of `RATIO_BASELINES` that was run, then oracle's capacity over atlas's. A capacity
    marked `*` is the highest rate swept (the true capacity may be higher, so ratios involving it
    are bounds); `< r` means the lowest swept rate `r` already missed."""
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


def _policy_rate_table(points: Sequence[SweepPoint], title: str,
                       fmt: Callable[[SweepPoint], str]) -> list[str]:
    """The lines of one policy x rate table under `title`: a cell is `fmt(point)`
    ("overloaded" for an overloaded point), `-` where the pair was not run, with `(k/n done)`
    after it where not every program completed."""
    rates = _rates(points)
    by_key = {(p.policy, p.rate): p for p in points}
    header = ["policy"] + [f"{r:g}/s" for r in rates]
    lines = [title, "", "| " + " | ".join(header) + " |",
             "|" + "|".join(" --- " for _ in header) + "|"]
    for policy in _policies(points):
        cells = [policy]
        for rate in rates:
            point = by_key.get((policy, rate))
            text = "-" if point is None else "overloaded" if point.overloaded else fmt(point)
            if point is not None and point.programs_completed < point.num_programs:
                text += f" ({point.programs_completed}/{point.num_programs} done)"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def latency_table(points: Sequence[SweepPoint]) -> str:
    """Markdown: policy x rate tables of normalized latency (`mean / P95 / P99`, s/token),
    throughput, makespan, time to first token (`P50 / P99`, s) and prefill tokens computed."""
    tables = [
        ("Normalized latency (s/token), mean / P95 / P99",
         lambda p: f"{p.mean_norm_latency:.4f} / {p.p95_norm_latency:.4f} / "
                   f"{p.p99_norm_latency:.4f}"),
        ("Throughput (generated tokens/s)", lambda p: f"{p.throughput_tokens_per_s:.1f}"),
        ("Makespan (s, first arrival to last finish)", lambda p: f"{p.makespan_s:.1f}"),
        ("Time to first token of a call (s), P50 / P99",
         lambda p: f"{p.ttft_p50_s:.3f} / {p.ttft_p99_s:.3f}"),
        ("Prefill tokens computed (prompts less prefix hits, plus recomputed KV)",
         lambda p: f"{p.prefill_tokens_computed}"),
    ]
    lines: list[str] = []
    for title, fmt in tables:
        lines += _policy_rate_table(points, title, fmt)
    return "\n".join(lines[:-1]) + "\n"


def points_table(points: Sequence[SweepPoint]) -> str:
    """Markdown, one row per run (policies in first-seen order, rates ascending): normalized
    latencies (mean, P95, P99), time to first token (P50, P99), throughput, prefill tokens
    computed, preemptions, completed programs, simulation wall time. An overloaded point's
    latencies read "overloaded" (the first) and "-"."""
    order = {policy: i for i, policy in enumerate(_policies(points))}
    lines = ["| policy | rate (programs/s) | mean | P95 | P99 | TTFT P50 (s) | TTFT P99 (s) | "
             "throughput (tokens/s) | prefill tokens | preemptions | completed | sim seconds |",
             "|" + "|".join(" --- " for _ in range(12)) + "|"]
    for p in sorted(points, key=lambda q: (order[q.policy], q.rate)):
        latencies = ("overloaded | - | -" if p.overloaded else
                     f"{p.mean_norm_latency:.4f} | {p.p95_norm_latency:.4f} | "
                     f"{p.p99_norm_latency:.4f}")
        lines.append(f"| {p.policy} | {p.rate:.3g} | {latencies} | "
                     f"{p.ttft_p50_s:.3f} | {p.ttft_p99_s:.3f} | "
                     f"{p.throughput_tokens_per_s:.0f} | {p.prefill_tokens_computed} | "
                     f"{p.num_preemptions} | {p.programs_completed}/{p.num_programs} | "
                     f"{p.sim_wall_seconds:.1f} |")
    return "\n".join(lines) + "\n"


def workload_of(points: Sequence[SweepPoint]) -> str:
    """The one workload of `points` (ValueError if they mix several)."""
    names = {p.workload for p in points}
    if len(names) != 1:
        raise ValueError(f"points: expected one workload, got {sorted(names)}")
    return names.pop()


def write_sweep(points: Sequence[SweepPoint], target: float, out_dir: str | Path,
                command: str | None = None) -> tuple[Path, Path]:
    """Write `sweep_<workload>.md` (target, policy x rate tables, capacity table) and
    `sweep_<workload>.png` (mean normalized latency against rate, log y, target dashed) into
    `out_dir`; returns their paths."""
    workload = workload_of(points)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = out / f"sweep_{workload}.md", out / f"sweep_{workload}.png"
    parts = [f"# Rate sweep: {workload}", ""]
    if command:
        parts += ["```", command, "```", ""]
    parts += [f"Latency target: {target:.4f} s/token ({TARGET_FACTOR:g} x vllm's mean at "
              f"{UNLOADED_RATE:g} programs/s)", "", latency_table(points),
              capacity_table(points, target)]
    md_path.write_text("\n".join(parts))
    plot_latency(points, [target], png_path, f"{workload}: latency against rate")
    return md_path, png_path


def plot_latency(points: Sequence[SweepPoint], targets: Sequence[float], path: Path,
                 title: str) -> None:
    """PNG: mean normalized latency against rate, one line per policy (overloaded points
    left out), log y, each target a dashed line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        for policy in _policies(points):
            own = sorted((p for p in points if p.policy == policy and not p.overloaded
                          and p.mean_norm_latency > 0),
                         key=lambda p: p.rate)
            if own:
                ax.plot([p.rate for p in own], [p.mean_norm_latency for p in own],
                        marker="o", label=policy)
        for target in targets:
            ax.axhline(target, linestyle="--", color="gray", label=f"target {target:.3g}")
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
