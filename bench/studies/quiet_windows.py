"""How long the runs of quiet decode steps of one simulated run are: the bound on what a
simulator that fast-forwards them could save.

    python -m bench.studies.quiet_windows [--workload mixed] [--programs 300] [--rate 0.5]
        [--seed 0] [--policy atlas]

A step starts a new window (a change point) when any of these holds, else it continues the
window of the step before it (the issue's "nothing can change"):
- `arrival`: a call was added since the step before;
- `finish`: the step before finished a call;
- `level_move`: the step before moved a call to another level (its quantum was used up);
- `not_decode`: the step runs a prefill chunk, or is empty of chunks;
- `block_boundary`: a decode in it writes the first token of a block (it needs a block the
  step before did not; inside a multistep round the block was reserved at the round's start).
Every reason that holds is counted, and so are the steps the scheduler planned
(`steps_new_round`; the others are multistep continuations). A fast-forward path that
charged a whole window as one step would still run `windows` iterations: `steps / windows`
bounds its saving on the step loop (events cost the same). Windows are also counted as if
block boundaries were free (`windows_without_blocks`: block allocation batched too). Prints
one JSON line.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from contextlib import ExitStack
from unittest import mock

from bench.sim.baselines import BLOCK_SIZE
from bench.sim.simulate import simulate
from bench.sim.trace import Trace
from bench.support.sim_run_arguments import add_sim_run_arguments, sim_run_trace
from engine.llm_engine import LLMEngine
from scheduler.call_state import SampledToken
from scheduler.plan import SchedulePlan
from scheduler.scheduler import Scheduler

REASONS = ("arrival", "finish", "level_move", "not_decode", "block_boundary")


class _Watch:
    """What happened since the last step, and the counts so far."""

    def __init__(self) -> None:
        self.added = self.finished = self.moved = False
        self.reasons: Counter[str] = Counter()
        self.steps = self.new_rounds = self.windows = self.windows_without_blocks = 0

    def step(self, plan: SchedulePlan, sampled: list[SampledToken]) -> None:
        """Classify the step of `plan` (its `sampled` tokens: whether it finished calls)."""
        chunks = plan.chunks
        reasons = {
            "arrival": self.added, "finish": self.finished, "level_move": self.moved,
            "not_decode": not chunks or not all(c.is_decode for c in chunks),
            "block_boundary": any(c.start % BLOCK_SIZE == 0 for c in chunks if c.is_decode)}
        self.steps += 1
        self.new_rounds += not plan.is_continuation
        self.reasons.update(name for name, holds in reasons.items() if holds)
        self.windows += any(reasons.values())
        self.windows_without_blocks += any(v for k, v in reasons.items()
                                           if k != "block_boundary")
        self.added = self.moved = False
        self.finished = any(s.finish_reason is not None for s in sampled)


def count_windows(trace: Trace, policy: str) -> dict[str, float]:
    """One simulated run of `trace` under `policy`, instrumented: steps, windows, and how
    often each reason held."""
    watch = _Watch()
    add_call, update, move = LLMEngine.add_call, Scheduler.update, Scheduler._move

    def watched_add(self, *args, **kwargs):
        watch.added = True
        return add_call(self, *args, **kwargs)

    def watched_update(self, plan, *args, **kwargs):
        sampled = update(self, plan, *args, **kwargs)
        if not plan.is_empty:  # an idle tick is no step (the executor counts none)
            watch.step(plan, sampled)
        return sampled

    def watched_move(self, *args, **kwargs):
        watch.moved = True
        return move(self, *args, **kwargs)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(LLMEngine, "add_call", watched_add))
        stack.enter_context(mock.patch.object(Scheduler, "update", watched_update))
        stack.enter_context(mock.patch.object(Scheduler, "_move", watched_move))
        result = simulate(trace, policy)
    if result.num_steps != watch.steps:
        raise RuntimeError(f"counted {watch.steps} steps, the run made {result.num_steps}")
    return {"steps": watch.steps, "windows": watch.windows,
            "steps_per_window": round(watch.steps / watch.windows, 3),
            "windows_without_blocks": watch.windows_without_blocks,
            "steps_per_window_without_blocks": round(
                watch.steps / watch.windows_without_blocks, 3),
            "calls": len(result.call_finish), "steps_new_round": watch.new_rounds,
            **{f"steps_with_{name}": watch.reasons[name] for name in REASONS}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.quiet_windows",
                                     description=__doc__.splitlines()[0])
    add_sim_run_arguments(parser, programs=300)
    args = parser.parse_args(argv)
    print(json.dumps({"workload": args.workload, "programs": args.programs, "rate": args.rate,
                      "policy": args.policy,
                      **count_windows(sim_run_trace(args), args.policy)}))


if __name__ == "__main__":
    main()
