"""`python -m bench.sim.workloads stats [--programs N] [--seed S] [--workloads W,...]`: generated
workload statistics beside the paper's (calls per program, mean prefill and decode tokens per
call), as markdown; for `coding`, a second table sets its session statistics beside the
reference figures its module names; `lats_stop`, `coding_swe` and `mapreduce` get a table
each beside the figures they are fitted to (`fit_rows`), and `--arrivals` adds one of the
arrival processes' mean rate and gap CV."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench.sim.trace import Trace
from bench.sim.workloads import (bfcl, coding, coding_swe, fit_rows, lats, lats_stop, mapreduce,
                                  mixed, sharegpt)
from server.config_flags import name_list

PAPER = {"sharegpt": (6.66, 256, 277), "bfcl": (10.75, 735, 34), "lats": (159.7, 467, 73), "mixed": None,
         "coding": None, "lats_stop": (159.7, 467, 73), "coding_swe": None, "mapreduce": None}
WORKLOADS = tuple(PAPER)
NEEDS_TEXT = ("sharegpt", "bfcl", "mixed")  # generators that count real text (tokenizer, data)
CODING_SOURCE = "vLLM #57103"


def trace_stats(trace: Trace) -> tuple[int, float, float, float]:
    """(programs, calls per program, mean prompt tokens per call, mean output tokens per call)."""
    calls = [c for p in trace.programs for c in p.calls]
    n = len(trace.programs)
    return (
        n,
        len(calls) / n,
        statistics.fmean(c.prompt_len for c in calls),
        statistics.fmean(c.output_len for c in calls),
    )


def coding_rows(trace: Trace, sessions: tuple[coding.SessionStats, ...]) -> list[tuple[str, str, str]]:
    """(statistic, generated, reference) rows of a coding trace and its `SessionStats`."""
    n = len(sessions)
    delays = [c.delay for p in trace.programs for c in p.calls if c.delay > 0]
    outputs = [c.output_len for p in trace.programs for c in p.calls if c.call_id.startswith("t")
               and not c.call_id.endswith("-compact")]
    hit = sum(s.reusable_tokens for s in sessions) / sum(s.prompt_tokens for s in sessions)
    return [
        ("main-agent turns per program, median", f"{statistics.median(s.turns for s in sessions):g}",
         f"43 ({CODING_SOURCE})"),
        ("context at the last turn without compaction, median tokens",
         f"{statistics.median(s.final_context for s in sessions):.0f}", f"142k ({CODING_SOURCE})"),
        ("prefix-cache hit rate, ideal (compaction lowers it)", f"{hit:.1%}", f"> 96% ({CODING_SOURCE})"),
        ("programs with a subagent", f"{sum(1 for s in sessions if s.subagent_turns) / n:.1%}",
         f"44% ({CODING_SOURCE})"),
        ("subagent turns, median over subagents",
         f"{statistics.median([s.subagent_turns for s in sessions if s.subagent_turns] or [0]):g}", "assumed"),
        ("compactions per program, mean", f"{statistics.fmean(s.compactions for s in sessions):.2f}", "-"),
        ("longest prompt, tokens", f"{max(c.prompt_len for p in trace.programs for c in p.calls)}",
         f"<= {coding.PROMPT_CAP} (window {coding.MAX_CONTEXT})"),
        ("main-agent output tokens per turn, median", f"{statistics.median(outputs):g}", "assumed"),
        ("tool time (call delay), median / p99 s",
         f"{statistics.median(delays):.1f} / {statistics.quantiles(delays, n=100)[98]:.0f}", "assumed"),
    ]


def _workload_list(text: str) -> list[str]:
    return name_list(text, WORKLOADS, "workloads")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sim.workloads")
    parser.add_argument("command", choices=["stats"])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workloads", type=_workload_list, default=list(WORKLOADS),
                        help=f"comma-separated (default: {','.join(WORKLOADS)})")
    parser.add_argument("--arrivals", action="store_true",
                        help="also the arrival processes' statistics (bench/sim/arrivals.py)")
    args = parser.parse_args(argv)
    text: dict[str, Any] = {}
    if any(w in NEEDS_TEXT for w in args.workloads):
        from bench.sim.sharegpt import load_conversations
        from bench.sim.workloads.common import load_tokenizer

        text = {"tokenizer": load_tokenizer(), "conversations": load_conversations()}
    rate = float("inf")
    generators = {
        "sharegpt": lambda: sharegpt.generate(args.programs, args.seed, rate, **text),
        "bfcl": lambda: bfcl.generate(args.programs, args.seed, rate, tokenizer=text["tokenizer"]),
        "lats": lambda: lats.generate(args.programs, args.seed, rate),
        "mixed": lambda: mixed.generate(args.programs, args.seed, rate, **text),
        "coding": lambda: coding_run[0],
        "lats_stop": lambda: lats_stop.generate(args.programs, args.seed, rate),
        "coding_swe": lambda: swe_run[0],
        "mapreduce": lambda: mapreduce.generate(args.programs, args.seed, rate),
    }
    coding_run = coding.generate_with_stats(args.programs, args.seed, rate) if "coding" in args.workloads else None
    swe_run = (coding_swe.generate_with_stats(args.programs, args.seed, rate)
               if "coding_swe" in args.workloads else None)
    traces = {name: generators[name]() for name in args.workloads}
    print("| workload | programs | calls/program (paper) | mean prefill tokens (paper) | mean decode tokens (paper) |")
    print("| --- | --- | --- | --- | --- |")
    for name, trace in traces.items():
        n, calls, prefill, decode = trace_stats(trace)
        paper = PAPER[name]
        ref = [f" ({paper[0]:g})", f" ({paper[1]:g})", f" ({paper[2]:g})"] if paper else ["", "", ""]
        print(f"| {name} | {n} | {calls:.2f}{ref[0]} | {prefill:.0f}{ref[1]} | {decode:.0f}{ref[2]} |")
    tables = {"coding": lambda: coding_rows(*coding_run),
              "lats_stop": lambda: fit_rows.lats_stop_rows(traces["lats_stop"]),
              "coding_swe": lambda: fit_rows.coding_swe_rows(*swe_run),
              "mapreduce": lambda: fit_rows.mapreduce_rows(traces["mapreduce"])}
    for name, rows in tables.items():
        if name in traces:
            _print_rows(name, rows())
    if args.arrivals:
        _print_rows(f"arrivals ({fit_rows.ARRIVAL_DRAWS:,} at rate 1, seed {args.seed})",
                    fit_rows.arrival_rows(args.seed))


def _print_rows(title: str, rows: list[tuple[str, str, str]]) -> None:
    print()
    print(f"| {title} | generated | reference |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
