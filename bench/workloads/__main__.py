"""`python -m bench.workloads stats [--programs N] [--seed S]`: generated workload statistics
beside the paper's (calls per program, mean prefill and decode tokens per call), as markdown."""

from __future__ import annotations

import argparse
import statistics

from bench.sharegpt import load_conversations
from bench.trace import Trace
from bench.workloads import bfcl, lats, mixed, sharegpt
from bench.workloads.common import load_tokenizer

PAPER = {"sharegpt": (6.66, 256, 277), "bfcl": (10.75, 735, 34), "lats": (159.7, 467, 73), "mixed": None}


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workloads")
    parser.add_argument("command", choices=["stats"])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer()
    conversations = load_conversations()
    rate = float("inf")
    traces = {
        "sharegpt": sharegpt.generate(args.programs, args.seed, rate, tokenizer=tokenizer, conversations=conversations),
        "bfcl": bfcl.generate(args.programs, args.seed, rate, tokenizer=tokenizer),
        "lats": lats.generate(args.programs, args.seed, rate),
        "mixed": mixed.generate(args.programs, args.seed, rate, tokenizer=tokenizer, conversations=conversations),
    }
    print("| workload | programs | calls/program (paper) | mean prefill tokens (paper) | mean decode tokens (paper) |")
    print("| --- | --- | --- | --- | --- |")
    for name, trace in traces.items():
        n, calls, prefill, decode = trace_stats(trace)
        paper = PAPER[name]
        ref = [f" ({paper[0]:g})", f" ({paper[1]:g})", f" ({paper[2]:g})"] if paper else ["", "", ""]
        print(f"| {name} | {n} | {calls:.2f}{ref[0]} | {prefill:.0f}{ref[1]} | {decode:.0f}{ref[2]} |")


if __name__ == "__main__":
    main()
