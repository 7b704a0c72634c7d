"""Rows of `python -m bench.sim.workloads stats` for the generators fitted to figures other
than the paper's: each row is (statistic, generated, reference), the reference being the
figure the generator was fitted to, the theory it should meet, or "assumed"."""

from __future__ import annotations

import statistics

from bench.sim.arrivals import GammaArrivals, OnOff, Poisson
from bench.sim.trace import Trace, TraceProgram
from bench.sim.workloads import coding_swe, lats_stop, mapreduce
from bench.sim.workloads.coding import SessionStats

Row = tuple[str, str, str]
ARRIVAL_DRAWS = 100_000
ANTHROPIC = "Anthropic multi-agent research"


def arrival_rows(seed: int) -> list[Row]:
    """Mean rate and gap CV of each process over ARRIVAL_DRAWS arrivals at rate 1."""
    processes = [(Poisson(), "CV 1 (theory)"),
                 (GammaArrivals(), "CV 1.414: shape 0.5 (BurstGPT-Perf)"),
                 (GammaArrivals(3.0), "CV 3 (theory)"),
                 (OnOff(), f"CV {OnOff().cv():.3f} (MMPP-2 theory; parameters assumed)")]
    rows = []
    for process, reference in processes:
        times = process.times(ARRIVAL_DRAWS, 1.0, seed)
        gaps = [b - a for a, b in zip([0.0] + times[:-1], times)]
        mean = statistics.fmean(gaps)
        rows.append((f"`{process.spec}`: mean rate / gap CV",
                     f"{1 / mean:.3f} / {statistics.pstdev(gaps) / mean:.3f}",
                     f"1 / {reference}"))
    return rows


def lats_stop_rows(trace: Trace) -> list[Row]:
    programs = trace.programs
    iterations = [lats_stop.iterations_of(len(p.calls)) for p in programs]
    calls = [c for p in programs for c in p.calls]
    early = sum(1 for i in iterations if i < lats_stop.MAX_ITERATIONS) / len(iterations)
    theory_early = 1 - (1 - lats_stop.SUCCESS) ** (lats_stop.MAX_ITERATIONS - 1)
    return [
        ("iterations per program, mean", f"{statistics.fmean(iterations):.2f}",
         f"{lats_stop.mean_iterations():.2f} (theory)"),
        ("iterations per program, min / median / max",
         f"{min(iterations)} / {statistics.median(iterations):g} / {max(iterations)}",
         f"1 / 10 / {lats_stop.MAX_ITERATIONS} (cap; theory median 10)"),
        ("searches ending before the cap", f"{early:.1%}", f"{theory_early:.1%} (theory)"),
        ("calls per program, mean", f"{len(calls) / len(programs):.1f}", "159.7 (Autellix)"),
        ("prompt tokens per call, mean", f"{statistics.fmean(c.prompt_len for c in calls):.0f}",
         "467 (Autellix; the path re-sent raises it)"),
        ("prompt tokens past the longest parent prompt + output, mean",
         f"{statistics.fmean(_new_tokens(p) for p in programs):.0f}", "assumed"),
        ("output tokens per call, mean", f"{statistics.fmean(c.output_len for c in calls):.0f}",
         "73 (Autellix)"),
    ]


def _new_tokens(program: TraceProgram) -> float:
    """Mean over a program's calls of prompt - max(parent prompt + parent output) (>= 0): what
    an ideal prefix cache leaves to prefill (a root call: its whole prompt)."""
    by_id = {c.call_id: c for c in program.calls}
    new = [max(0, c.prompt_len - max((by_id[p].prompt_len + by_id[p].output_len
                                      for p in c.parents), default=0))
           for c in program.calls]
    return statistics.fmean(new)


def coding_swe_rows(trace: Trace, sessions: tuple[SessionStats, ...]) -> list[Row]:
    delays = [c.delay for p in trace.programs for c in p.calls if c.delay > 0]
    turns = [s.turns for s in sessions]
    contexts = [s.final_context for s in sessions]
    return [
        ("turns per program, min / median / max",
         f"{min(turns)} / {statistics.median(turns):g} / {max(turns)}",
         "10-60 (issue 39); median assumed"),
        ("context at the last turn, median / max tokens",
         f"{statistics.median(contexts):.0f} / {max(contexts)}", "tens of thousands (issue 39)"),
        ("tool times under 1 s", f"{sum(1 for d in delays if d < 1) / len(delays):.1%}",
         "most (issue 39)"),
        ("tool time, median / p99 / max s",
         f"{statistics.median(delays):.2f} / {statistics.quantiles(delays, n=100)[98]:.0f} / "
         f"{max(delays):.0f}", f"a tail to minutes (issue 39), <= {coding_swe.MAX_S:g}"),
    ]


def mapreduce_rows(trace: Trace) -> list[Row]:
    programs = trace.programs
    workers = [mapreduce.workers_of(p) for p in programs]
    rows = [("workers per program, mean", f"{statistics.fmean(workers):.2f}",
             f"{mapreduce.mean_workers():.2f} (theory; class shares assumed)"),
            ("calls per program, mean",
             f"{statistics.fmean(len(p.calls) for p in programs):.1f}", "-")]
    for task in mapreduce.CLASSES:
        low, high = task.workers
        per_worker = [(len(p.calls) - 2) / w for p, w in zip(programs, workers)
                      if low <= w <= high]
        rows.append((f"{task.name}: share / calls per worker, mean",
                     f"{len(per_worker) / len(programs):.1%} / "
                     f"{statistics.fmean(per_worker or [0]):.1f}",
                     f"{task.share:.0%} assumed / {task.calls[0]}-{task.calls[1]} ({ANTHROPIC})"))
    return rows
