"""What constrained decoding costs a batch: tokens/s of one batch with 0%, 50% and 100% of its
calls constrained, side by side in one run, on SmolLM2-135M.

    python -m bench.studies.structured_throughput [--num 32] [--output-tokens 64] [--repeats 3]

Every call has its own short prompt, `max_tokens` = --output-tokens and `ignore_eos`; a
constrained call's schema is a JSON string of at least 10,000 characters, so its grammar
never completes inside the budget and every call, constrained or not, generates exactly
--output-tokens tokens: the rates compare equal work. Each fraction runs --repeats times, in
turn with the others (so drift of a shared machine spreads over all of them); the table
gives the median rate of each and its ratio to the unconstrained batch. One engine serves
every run (the grammar is compiled by its first constrained call, then cached: the timed runs
measure masks, not compiles).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench.sim.baselines import PLAIN
from engine import LLM, SamplingParams
from engine.models.smollm2 import ensure_smollm2_dir
from engine.structured.spec import StructuredOutput

LONG_STRING = StructuredOutput(json.dumps({"type": "string", "minLength": 10_000}))
FRACTIONS = (0.0, 0.5, 1.0)


def batch_params(num: int, fraction: float, output_tokens: int) -> list[SamplingParams]:
    """`num` calls' parameters, the first `fraction` of them constrained."""
    constrained = round(num * fraction)
    return [SamplingParams(max_tokens=output_tokens, ignore_eos=True,
                           structured=LONG_STRING if i < constrained else None)
            for i in range(num)]


def run_once(llm: LLM, prompts: list[str], params: list[SamplingParams]) -> float:
    """Generated tokens per second of one batch (checks every call made all its tokens)."""
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - started
    tokens = sum(len(o.token_ids) for o in outputs)
    assert tokens == sum(p.max_tokens for p in params), "a call stopped early"
    return tokens / seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    llm = LLM(str(ensure_smollm2_dir()), **PLAIN, max_num_seqs=args.num)
    prompts = [f"Write a long story about the number {i}." for i in range(args.num)]
    llm.generate(prompts[:2], batch_params(2, 0.5, 2))  # warm-up; compiles the grammar
    rates: dict[float, list[float]] = {f: [] for f in FRACTIONS}
    for _ in range(args.repeats):
        for fraction in FRACTIONS:
            rates[fraction].append(run_once(llm, prompts,
                                            batch_params(args.num, fraction,
                                                         args.output_tokens)))
    base = statistics.median(rates[0.0])
    report = {"num": args.num, "output_tokens": args.output_tokens, "threads": args.threads,
              "rows": [{"constrained": f, "tokens_per_s": round(statistics.median(r), 1),
                        "runs": [round(x, 1) for x in r],
                        "ratio": round(statistics.median(r) / base, 3)}
                       for f, r in rates.items()]}
    print(f"batch of {args.num} calls x {args.output_tokens} tokens, {args.threads} torch "
          f"threads, median of {args.repeats}")
    print("| constrained | tokens/s | x unconstrained | runs |\n| --- | --- | --- | --- |")
    for row in report["rows"]:
        print(f"| {row['constrained']:.0%} | {row['tokens_per_s']} | {row['ratio']} | "
              f"{row['runs']} |")
    return report


if __name__ == "__main__":
    main()
