"""LATS workload: synthetic Language Agent Tree Search programs with the paper's statistics
(159.7 calls per program, mean 467 prefill / 73 decode tokens per call, parallel).

A program is a root call (the first generation from the task) followed by iterations. Each
iteration expands CHILDREN nodes in parallel (one call each, all with the same parent: the call
that selected the node to expand, i.e. the previous iteration's reflection call, or the root),
evaluates every child (one call per child, parent = that child), then runs one reflection /
selection call whose parents are all the evaluations. An iteration is 2 * CHILDREN + 1 calls; the
number of iterations is drawn uniformly from ITERATIONS (mean 1 + 11 * 14.5 = 160.5 calls).
Lengths are seeded lognormal draws around the paper's means; delays are 0.
"""

from __future__ import annotations

import random

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.common import check_num_programs, lognormal_int, with_arrivals

WORKLOAD = "lats"
CHILDREN = 5
ITERATIONS = (14, 15)
PROMPT_MEAN, PROMPT_SIGMA, PROMPT_MAX = 467.0, 0.5, 4096
OUTPUT_MEAN, OUTPUT_SIGMA, OUTPUT_MAX = 73.0, 0.6, 1024
MIN_TOKENS = 4


def generate(num_programs: int, seed: int, rate: float) -> Trace:
    """`num_programs` LATS programs with Poisson(`rate`) arrivals, deterministic per `seed`."""
    check_num_programs(num_programs)
    rng = random.Random(seed)
    programs = [TraceProgram(f"{WORKLOAD}-{i}", 0.0, _program_calls(rng), WORKLOAD) for i in range(num_programs)]
    return with_arrivals(programs, seed, rate)


def _program_calls(rng: random.Random) -> tuple[TraceCall, ...]:
    calls: list[TraceCall] = []

    def add(name: str, parents: tuple[str, ...]) -> str:
        prompt_len = lognormal_int(rng, PROMPT_MEAN, PROMPT_SIGMA, MIN_TOKENS, PROMPT_MAX)
        output_len = lognormal_int(rng, OUTPUT_MEAN, OUTPUT_SIGMA, MIN_TOKENS, OUTPUT_MAX)
        calls.append(TraceCall(name, prompt_len, output_len, parents))
        return name

    selected = add("root", ())
    for it in range(rng.randint(*ITERATIONS)):
        children = [add(f"i{it}-expand{c}", (selected,)) for c in range(CHILDREN)]
        evaluations = tuple(add(f"i{it}-eval{c}", (child,)) for c, child in enumerate(children))
        selected = add(f"i{it}-reflect", evaluations)
    return tuple(calls)
