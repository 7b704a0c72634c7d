"""Checking the calibrated simulator against the real engine: `comparison` sets a real run
(`bench.support.real_run.run_real`) beside a simulated run of the same trace with the same engine
overrides, program by program (completion time, finish - arrival) and overall (mean normalized
latency, makespan, steps, preemptions, the most calls in the engine at once), with the
simulator's error relative to the real engine; `format_comparison` prints it as a table.
"""

from __future__ import annotations

from typing import Any

from bench.sim.metrics import compute_metrics
from bench.sim.simulate import SimResult


def percent_error(sim: float, real: float) -> float:
    return 100.0 * (sim - real) / real if real else float("nan")


def peak_active_calls(result: SimResult) -> int:
    """The most calls in the engine at once (added, not finished): above `max_num_seqs`,
    calls queued."""
    events = sorted([(t, 1) for t in result.call_start.values()]
                    + [(t, -1) for t in result.call_finish.values()])
    active = peak = 0
    for _, change in events:  # at a tie, a finish (-1) sorts before a start
        active += change
        peak = max(peak, active)
    return peak


def comparison(real: SimResult, sim: SimResult) -> dict[str, Any]:
    """Per-program completion times (finish - arrival), mean normalized latency and makespan
    of the two runs, with the simulator's error relative to the real engine."""
    by_id = {p.program_id: p for p in sim.programs}
    programs = []
    for r in sorted(real.programs, key=lambda p: p.arrival):
        s = by_id[r.program_id]
        programs.append({"program": r.program_id, "calls": r.num_calls,
                         "tokens": r.generated_tokens, "arrival": r.arrival,
                         "real_s": r.finish - r.arrival, "sim_s": s.finish - s.arrival,
                         "error_pct": percent_error(s.finish - s.arrival, r.finish - r.arrival)})
    mr, ms = compute_metrics(real.programs), compute_metrics(sim.programs)
    errors = [abs(p["error_pct"]) for p in programs]
    return {
        "policy": real.policy, "programs": programs,
        "mean_norm_latency": {"real": mr.mean_norm_latency, "sim": ms.mean_norm_latency,
                              "error_pct": percent_error(ms.mean_norm_latency,
                                                         mr.mean_norm_latency)},
        "makespan": {"real": mr.makespan_s, "sim": ms.makespan_s,
                     "error_pct": percent_error(ms.makespan_s, mr.makespan_s)},
        "mean_abs_program_error_pct": sum(errors) / len(errors),
        "max_abs_program_error_pct": max(errors),
        "steps": {"real": real.num_steps, "sim": sim.num_steps},
        "preemptions": {"real": real.num_preemptions, "sim": sim.num_preemptions},
        "peak_active_calls": {"real": peak_active_calls(real), "sim": peak_active_calls(sim)},
        "real_wall_s": real.wall_seconds,
    }


def format_comparison(c: dict[str, Any]) -> str:
    lines = [f"policy {c['policy']}: per-program completion time (finish - arrival, s)",
             f"  {'program':<14}{'calls':>6}{'tokens':>8}{'arrival':>9}{'real':>9}{'sim':>9}"
             f"{'error':>9}"]
    for p in c["programs"]:
        lines.append(f"  {p['program']:<14}{p['calls']:>6}{p['tokens']:>8}{p['arrival']:>9.2f}"
                     f"{p['real_s']:>9.2f}{p['sim_s']:>9.2f}{p['error_pct']:>+8.1f}%")
    m, k = c["mean_norm_latency"], c["makespan"]
    lines += [
        f"  mean |error| per program {c['mean_abs_program_error_pct']:.1f}%, "
        f"max {c['max_abs_program_error_pct']:.1f}%",
        f"  mean normalized latency (s/token): real {m['real']:.4f}  sim {m['sim']:.4f}  "
        f"error {m['error_pct']:+.1f}%",
        f"  makespan (s): real {k['real']:.2f}  sim {k['sim']:.2f}  error {k['error_pct']:+.1f}%",
        f"  steps real {c['steps']['real']} / sim {c['steps']['sim']}; preemptions real "
        f"{c['preemptions']['real']} / sim {c['preemptions']['sim']}; most calls in the engine "
        f"at once real {c['peak_active_calls']['real']} / sim {c['peak_active_calls']['sim']}",
    ]
    return "\n".join(lines)
