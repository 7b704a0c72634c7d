"""Sensitivity of a policy to one scheduler knob at a time, in the simulator.

`agentix bench sensitivity --workload mixed --rate 5 --programs 500` replays one trace under
`atlas` (the baseline's engine features: chunked prefill, prefix caching, `auto` preemption,
multistep 4) once per value of each knob in `KNOBS`, every other knob at its default, and writes
`sensitivity_<workload>.md` (a table per knob: mean / P95 / P99 normalized latency, throughput,
preemptions; the default marked) and `sensitivity_<workload>.png` (mean normalized latency
against each knob's value). Pick a rate near the policy's capacity: unloaded, no knob matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from tqdm import tqdm

from engine.config import EngineConfig

from bench.analysis.sweep import generate_trace
from bench.sim.baselines import BASELINES, engine_config_for
from bench.sim.metrics import compute_metrics
from bench.sim.simulate import simulate

# knob -> values swept; 0 turns `starvation_beta` (anti-starvation) and
# `program_service_halflife` (the decay of a program's service, seconds) off.
KNOBS: Mapping[str, tuple[float, ...]] = MappingProxyType({
    "num_queues": (1, 2, 4, 8, 16),
    "quantum_steps": (4, 16, 64, 256, 1024),
    "starvation_beta": (0, 2, 4, 8, 16),
    "multistep": (1, 2, 4, 8, 16),
    "program_service_halflife": (0, 30, 120, 600),
})


@dataclass(frozen=True)
class KnobPoint:
    """One run with `knob` set to `value`; latencies in seconds per generated token."""

    knob: str
    value: float
    is_default: bool
    programs_completed: int
    mean_norm_latency: float
    p95_norm_latency: float
    p99_norm_latency: float
    throughput_tokens_per_s: float
    num_preemptions: int
    sim_wall_seconds: float


def default_value(policy: str, knob: str) -> Any:
    """The value `knob` (a scheduler field) takes under `policy`'s baseline configuration."""
    return getattr(EngineConfig.from_flat(**engine_config_for(policy)).scheduler, knob)


def run_knobs(workload: str, rate: float, num_programs: int, seed: int = 0,
              policy: str = "atlas", knobs: Mapping[str, Sequence[float]] | None = None,
              preset: str = "a100-80g", model: str = "llama-3.1-8b",
              progress: bool = True) -> list[KnobPoint]:
    """Simulate `policy` once per knob value on one trace; points in knob, value order."""
    knobs = KNOBS if knobs is None else knobs
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"knobs: unknown {sorted(unknown)}; choose from {sorted(KNOBS)}")
    if policy not in BASELINES:
        raise ValueError(f"policy must be one of {sorted(BASELINES)}, got {policy!r}")
    trace = generate_trace(workload, num_programs, seed, rate)
    points: list[KnobPoint] = []
    runs = [(knob, value) for knob, values in knobs.items() for value in values]
    bar = tqdm(total=len(runs), desc=f"sensitivity {workload}", unit="run", disable=not progress)
    try:
        for knob, value in runs:
            bar.set_postfix_str(f"{knob}={value:g}")
            result = simulate(trace, policy, preset=preset, model=model,
                              engine_overrides={knob: _typed(knob, value)})
            m = compute_metrics(result.programs)
            default = default_value(policy, knob)
            points.append(KnobPoint(
                knob=knob, value=value, is_default=_typed(knob, value) == default,
                programs_completed=m.programs_completed, mean_norm_latency=m.mean_norm_latency,
                p95_norm_latency=m.p95_norm_latency, p99_norm_latency=m.p99_norm_latency,
                throughput_tokens_per_s=m.throughput_tokens_per_s,
                num_preemptions=result.num_preemptions, sim_wall_seconds=result.wall_seconds))
            bar.update(1)
    finally:
        bar.close()
    return points


def _typed(knob: str, value: float) -> int | float | None:
    """Engine-config value of a knob value: integers for counts, a float for
    `starvation_beta`, None (off) for a `program_service_halflife` of 0, else a float."""
    if knob == "program_service_halflife":
        return float(value) if value else None
    return float(value) if knob == "starvation_beta" else int(value)


def knob_tables(points: Sequence[KnobPoint]) -> str:
    """Markdown: one table per knob, the default row marked with `(default)`."""
    lines: list[str] = []
    for knob in dict.fromkeys(p.knob for p in points):
        lines += [f"### {knob}", "",
                  "| value | mean | P95 | P99 | throughput (tokens/s) | preemptions |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for p in (q for q in points if q.knob == knob):
            label = f"{p.value:g}" + (" (default)" if p.is_default else "")
            lines.append(f"| {label} | {p.mean_norm_latency:.4f} | {p.p95_norm_latency:.4f} | "
                         f"{p.p99_norm_latency:.4f} | {p.throughput_tokens_per_s:.1f} | "
                         f"{p.num_preemptions} |")
        lines.append("")
    return "\n".join(lines)


def write_outputs(points: Sequence[KnobPoint], workload: str, out_dir: str | Path,
                  header: str) -> tuple[Path, Path]:
    """Write `sensitivity_<workload>.md` and `.png` (one panel per knob) into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = out / f"sensitivity_{workload}.md", out / f"sensitivity_{workload}.png"
    md_path.write_text(f"# Knob sensitivity: {workload}\n\n{header}\n\n{knob_tables(points)}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knobs = list(dict.fromkeys(p.knob for p in points))
    fig, axes = plt.subplots(1, len(knobs), figsize=(3.2 * len(knobs), 3.2), squeeze=False)
    try:
        for ax, knob in zip(axes[0], knobs):
            own = [p for p in points if p.knob == knob]
            ax.plot(range(len(own)), [p.mean_norm_latency for p in own], marker="o")
            for i, p in enumerate(own):
                if p.is_default:
                    ax.plot([i], [p.mean_norm_latency], marker="*", markersize=14, color="red")
            ax.set_xticks(range(len(own)), [f"{p.value:g}" for p in own])
            ax.set_xlabel(knob)
            ax.grid(True, alpha=0.3)
        axes[0][0].set_ylabel("mean normalized latency (s/token)")
        fig.suptitle(f"{workload}: one knob at a time (red star: default)")
        fig.tight_layout()
        fig.savefig(png_path, dpi=110)
    finally:
        plt.close(fig)
    return md_path, png_path

