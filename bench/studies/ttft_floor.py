"""The first-token floor of a workload: `python -m bench.studies.ttft_floor --workloads
coding,mixed [--programs N] [--seed S] [--model M] [--preset P] [--target SECONDS]`.

How soon can a call's first token come, whatever the scheduler does? Alone on an idle engine,
it needs the prefill of every prompt token whose KV is not cached. Per call of a generated
trace, on the cost model (`bench.sim.cost_model`):

- perfect cache: the cache holds every full block the call shares with a parent's sequence
  (its prompt and its output but the last token, whose KV is never computed) or with the
  shared system prompt of its `prefix_key` (written by an earlier program); the rest of the
  prompt, and at least its last token, is prefilled;
- no cache: the whole prompt is prefilled.

The prefill runs as chunked prefill runs it, `max_num_batched_tokens` tokens a step (the
simulator's engine configuration, `bench.sim.baselines`), each step priced with its context
by `CostModel.step_seconds` as a new scheduling round. The prompt ids are the simulator's
(`bench.sim.simulate.PromptMaker`), so a hit counted here is one its prefix cache can make:
a program simulated alone gets exactly these times once the shared prompt is warm (tested).

Prints per workload: the calls, the floor's P50 / P90 / P99 with a perfect cache and its P99
without, and the calls whose perfect-cache floor passes `--target` seconds (how many, their
median new tokens and context). No scheduler can bring a first-token P99 below the
perfect-cache P99 on that hardware: a TTFT target under it is impossible.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Sequence

from bench.analysis.sweep import generate_trace
from bench.sim.baselines import engine_config_for
from bench.sim.cost_model import GPU_PRESETS, MODEL_PRESETS, CostModel
from bench.sim.metrics import percentile
from bench.sim.simulate import PromptMaker
from bench.sim.trace import Trace, TraceProgram
from bench.sim.workloads import WORKLOADS


@dataclass(frozen=True)
class CallFloor:
    """One call's first-token floor: its prompt length, the tokens a perfect cache holds for
    it, and the seconds of prefill before its first token with that cache and with none."""

    call_id: str
    prompt_len: int
    cached: int
    seconds: float
    uncached_seconds: float

    @property
    def new_tokens(self) -> int:
        return self.prompt_len - self.cached


def shared_prefix(a: Sequence[int], b: Sequence[int], block_size: int) -> int:
    """Tokens in the full blocks that `a` and `b` share from their start."""
    low, high = 0, min(len(a), len(b)) // block_size
    while low < high:  # prefix equality is monotone in the length: bisect it
        middle = (low + high + 1) // 2
        if a[:middle * block_size] == b[:middle * block_size]:
            low = middle
        else:
            high = middle - 1
    return low * block_size


def prefill_seconds(cost: CostModel, start: int, end: int, budget: int) -> float:
    """Chunked prefill of tokens [start, end) alone: `budget` tokens a step."""
    seconds = 0.0
    while start < end:
        n = min(budget, end - start)
        seconds += cost.step_seconds([(n, start + n)])
        start += n
    return seconds


def program_floors(program: TraceProgram, index: int, prompts: PromptMaker, cost: CostModel,
                   block_size: int, budget: int) -> list[CallFloor]:
    """The floor of each call of `program` (the trace's `index`-th, as the simulator numbers
    it), in call order."""
    kv_of: dict[str, list[int]] = {}  # a call's sequence whose KV exists when it ends
    floors = []
    for call in program.calls:
        ids = prompts.prompt(index, call, program)
        cached = (program.prefix_len // block_size * block_size) if program.prefix_key else 0
        for parent in call.parents:
            cached = max(cached, shared_prefix(ids, kv_of[parent], block_size))
        cached = min(cached, len(ids) - 1)
        sequence = list(ids)
        for _ in range(call.output_len - 1):
            sequence.append(prompts.next_token(sequence))
        kv_of[call.call_id] = sequence
        floors.append(CallFloor(call.call_id, len(ids), cached,
                                prefill_seconds(cost, cached, len(ids), budget),
                                prefill_seconds(cost, 0, len(ids), budget)))
    return floors


def trace_floors(trace: Trace, cost: CostModel, policy: str = "gittins") -> list[CallFloor]:
    """Every call's floor, programs in trace order, on the block size and step budget of the
    simulator's `policy` configuration."""
    config = engine_config_for(policy)
    prompts = PromptMaker(cost.model.vocab)
    return [floor for index, program in enumerate(trace.programs)
            for floor in program_floors(program, index, prompts, cost, config["block_size"],
                                        config["max_num_batched_tokens"])]


def table_row(workload: str, floors: Sequence[CallFloor], target: float) -> str:
    seconds = [f.seconds for f in floors]
    over = [f for f in floors if f.seconds > target]
    median_new = statistics.median(f.new_tokens for f in over) if over else 0
    median_context = statistics.median(f.prompt_len for f in over) if over else 0
    return (f"| {workload} | {len(floors)} | {percentile(seconds, 50):.3f} / "
            f"{percentile(seconds, 90):.3f} / {percentile(seconds, 99):.3f} | "
            f"{percentile([f.uncached_seconds for f in floors], 99):.3f} | {len(over)} "
            f"({len(over) / len(floors):.1%}) | {median_new:,.0f} / {median_context:,.0f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.ttft_floor",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="coding,mixed",
                        help="comma-separated workload generators (bench.sim.workloads)")
    parser.add_argument("--programs", type=int, default=100, help="per workload (1-10,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=sorted(MODEL_PRESETS), default="llama-3.1-8b")
    parser.add_argument("--preset", choices=sorted(GPU_PRESETS), default="a100-80g")
    parser.add_argument("--target", type=float, default=2.0,
                        help="first-token target in seconds")
    args = parser.parse_args(argv)
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"--workloads: unknown {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    if not 1 <= args.programs <= 10_000 or not args.target > 0:
        parser.error("--programs must be in 1..10,000 and --target > 0")
    cost = CostModel.from_names(args.preset, args.model)
    print(f"First-token floor alone on an idle {args.model} x {args.preset}, {args.programs} "
          f"programs (seed {args.seed}); target {args.target:g} s\n")
    print(f"| workload | calls | perfect cache P50 / P90 / P99 (s) | no cache P99 (s) | calls "
          f"over {args.target:g} s | their median new tokens / prompt |")
    print("| --- | --- | --- | --- | --- | --- |")
    for workload in workloads:
        trace = generate_trace(workload, args.programs, args.seed, 1.0)
        print(table_row(workload, trace_floors(trace, cost), args.target), flush=True)


if __name__ == "__main__":
    main()
