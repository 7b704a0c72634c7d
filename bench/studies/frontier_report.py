"""The latency frontier's report (`bench.studies.latency_frontier`): rows, the serve default
against MLFQ, a markdown file and a two-panel plot."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from bench.analysis.steady_state import SteadyConfig, SteadyPoint, Verdict

BASELINE = "mlfq"


@dataclass(frozen=True)
class FrontierRow:
    """One variant's steady-state point on one seed: latency over the window's programs,
    TTFT and inter-token gap percentiles over their calls (of the finished ones only when
    the point is overloaded)."""

    variant: str
    seed: int
    rate: float
    steady: bool
    verdict: str
    measured: int
    done: int
    mean: float
    p95: float
    p99: float
    ttft_p50: float
    ttft_p99: float
    itl_p99: float

    @classmethod
    def of(cls, variant: str, run: SteadyPoint) -> FrontierRow:
        p = run.point
        return cls(variant, run.seed, p.rate, run.verdict is Verdict.STEADY, run.verdict.value,
                   run.measured, p.programs_completed, p.mean_norm_latency,
                   p.p95_norm_latency, p.p99_norm_latency, p.ttft_p50_s, p.ttft_p99_s,
                   p.itl_p99_s)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def against_baseline(default: FrontierRow, baseline: FrontierRow) -> str:
    """Whether `default` sits at or beyond `baseline`'s point in both planes (mean latency
    against TTFT P99, and against the P99 inter-token gap): at or below it on all three
    figures. An overloaded baseline's mean grows without bound, so any steady default is
    below it on the mean; an overloaded default is beyond nothing."""
    if not default.steady:
        return "no: the default is overloaded"
    worse = [name for name, mine, theirs in (
        ("mean", default.mean, baseline.mean if baseline.steady else float("inf")),
        ("TTFT P99", default.ttft_p99, baseline.ttft_p99),
        ("ITL P99", default.itl_p99, baseline.itl_p99)) if mine > theirs]
    if not worse:
        return "yes"
    return "no: worse on " + ", ".join(worse)


def _cells(row: FrontierRow) -> list[str]:
    latency = (f"{row.mean:.4f} / {row.p95:.4f} / {row.p99:.4f}" if row.steady
               else f"overloaded ({row.done}/{row.measured} done)")
    return [str(row.seed), row.variant, latency, f"{row.ttft_p50:.3f} / {row.ttft_p99:.3f}",
            f"{row.itl_p99:.4f}"]


def frontier_table(rows: Sequence[FrontierRow]) -> str:
    header = ["seed", "variant", "mean / P95 / P99 (s/token)", "TTFT P50 / P99 (s)",
              "ITL P99 (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def verdict_lines(rows: Sequence[FrontierRow], default: str) -> list[str]:
    """Per seed with both rows: the default against MLFQ, with their three figures."""
    lines = []
    for seed in _seeds(rows):
        mine = {row.variant: row for row in rows if row.seed == seed}
        if default in mine and BASELINE in mine:
            d, b = mine[default], mine[BASELINE]
            lines.append(
                f"- seed {seed}: {default} at or beyond {BASELINE} in both planes: "
                f"**{against_baseline(d, b)}** (mean {_mean(d)} against {_mean(b)}, TTFT P99 "
                f"{d.ttft_p99:.3f} against {b.ttft_p99:.3f} s, ITL P99 {d.itl_p99:.4f} "
                f"against {b.itl_p99:.4f} s)")
    return lines


def _mean(row: FrontierRow) -> str:
    return f"{row.mean:.4f}" if row.steady else "overloaded"


def steady_seeds(rows: Sequence[FrontierRow]) -> list[int]:
    """The seeds on which every variant ran steady, in first-row order."""
    return [seed for seed in _seeds(rows) if all(r.steady for r in rows if r.seed == seed)]


def _seeds(rows: Sequence[FrontierRow]) -> list[int]:
    """The rows' seeds, each once, in first-row order."""
    return list(dict.fromkeys(row.seed for row in rows))


def seed_means(rows: Sequence[FrontierRow]) -> dict[str, tuple[float, float, float]]:
    """Per variant, in first-row order: the mean over `steady_seeds` of (mean latency, TTFT
    P99, ITL P99); empty without such a seed."""
    seeds = set(steady_seeds(rows))
    by_variant: dict[str, list[FrontierRow]] = {}
    for row in rows:
        if row.seed in seeds:
            by_variant.setdefault(row.variant, []).append(row)
    return {name: (statistics.fmean(r.mean for r in own),
                   statistics.fmean(r.ttft_p99 for r in own),
                   statistics.fmean(r.itl_p99 for r in own))
            for name, own in by_variant.items()}


def plot_frontier(rows: Sequence[FrontierRow], default: str, path: Path, title: str) -> None:
    """PNG, two panels: TTFT P99 (log) and ITL P99 against mean normalized latency, one
    labelled point per variant (`seed_means`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = seed_means(rows)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    try:
        for ax, index, label in ((axes[0], 1, "TTFT P99 (s)"),
                                 (axes[1], 2, "P99 inter-token gap (s)")):
            for name, figures in points.items():
                style = ("*", "C3", 14) if name == default else (
                    ("s", "C1", 8) if name == BASELINE else ("o", "C0", 6))
                ax.plot(figures[0], figures[index], marker=style[0], color=style[1],
                        markersize=style[2], linestyle="none")
                ax.annotate(name, (figures[0], figures[index]), fontsize=7,
                            textcoords="offset points", xytext=(4, 3))
            if index == 1:
                ax.set_yscale("log")
            ax.set_xlabel("mean normalized latency (s/token)")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def write_frontier(rows: Sequence[FrontierRow], workload: str, rate: float,
                   config: SteadyConfig, out: Path, command: str, default: str) -> Path:
    """Write `frontier_<workload>.md` and `.png` into `out`; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    md_path = out / f"frontier_{workload}.md"
    overloaded = sorted({row.variant for row in rows if not row.steady})
    seeds_text = ", ".join(map(str, steady_seeds(rows))) or "none"
    parts = [f"# Latency frontier: {workload} at {rate:g} programs/s", "", "```", command,
             "```", "",
             f"Steady state (`bench.analysis.steady_state`): warm-up {config.warmup_programs} "
             f"programs, window {config.window_programs}, tail {config.tail_programs}; a point "
             "is overloaded by the rule of `agentix bench capacity`. Overloaded points give "
             "their TTFT and gaps over the finished programs' calls only.", "",
             frontier_table(rows),
             *verdict_lines(rows, default), "",
             f"The plot (`frontier_{workload}.png`) shows each variant at its mean over the "
             f"seeds on which every variant is steady ({seeds_text}); overloaded on some seed: "
             + (", ".join(overloaded) if overloaded else "none") + "."]
    md_path.write_text("\n".join(parts) + "\n")
    plot_frontier(rows, default, out / f"frontier_{workload}.png",
                  f"{workload} at {rate:g}/s, steady state, mean over seeds {seeds_text}: "
                  "first token and stream against mean latency")
    return md_path
