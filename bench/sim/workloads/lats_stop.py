"""LATS with early stop (`lats_stop`): `lats`'s tree search as LATS runs it, the search
ending at the first iteration that finds a solution, and prompts that carry the tree path.

`lats` (kept for the figures measured on it) runs 14 or 15 iterations, every program alike.
Here, as in LATS (Zhou et al., 2023, arXiv 2310.04406; its code, lapisrocks/
LanguageAgentTreeSearch, `hotpot/lats.py`: `lats_search(..., iterations=50)` returns at the
first terminal node with reward 1, `expand_node` stops at depth 7, `n_generate_sample 5`):

- Iterations: each iteration is `lats`'s (CHILDREN expansions of the selected node, one
  evaluation per child, one reflection / selection call after all of them) and finds a
  solution with probability SUCCESS, independently; the search stops there, or after
  MAX_ITERATIONS. The count is a geometric law capped at MAX_ITERATIONS:
  E[iterations] = (1 - (1 - p)^M) / p = 14.46 for p = SUCCESS, M = MAX_ITERATIONS, so
  1 + 11 x 14.46 = 160.1 calls per program on average, Autellix's 159.7 (SUCCESS is fitted
  to that mean; the paper gives no distribution). 97% of the searches stop early.
- Depth: the node an iteration expands goes one level down each iteration (its best child,
  drawn uniformly), from the root (depth 0) to MAX_DEPTH - 1; past that (a depth-limit node
  in LATS) the search backtracks to a depth drawn uniformly in [0, MAX_DEPTH).
- Prompts re-send the path (a LATS state is the task plus every thought, action and
  observation from the root): the root call's prompt is the task; a node's path is its
  parent's path, then the parent's expansion output and its observation; an expansion's
  prompt is its node's path, an evaluation's the path, its child's output and observation
  and an instruction (EVAL_TOKENS), the reflection's the path, the chosen child's output and
  observation and REFLECT_TOKENS. So prompt = parent prompt + parent output + new tokens
  along every path, and a replay (one token stream per program, `bench.sim.simulate.
  PromptMaker`) gives each call its parent's prompt and output as a prefix. Siblings'
  outputs are made-up ids of one stream, so a replay shares a little more between the
  evaluations of one node's children (their outputs) than a real search would.
- Lengths: seeded lognormal draws; outputs keep `lats`'s (mean 73, Autellix's). The task
  (TASK_MEAN: instructions and question), observations (OBSERVATION_MEAN: a search result
  or a test's output, trimmed) and instructions are assumptions. Re-sending the path makes
  the mean prompt ~770 tokens, not Autellix's 467: a path of up to 6 steps of a 73-token
  output and its observation outweighs 467 on its own whatever the task, so 467 cannot hold
  with paths re-sent. The tokens a call adds to its parent's prompt and output (what an
  ideal prefix cache leaves to prefill) average ~50 (`python -m bench.sim.workloads stats`).
"""

from __future__ import annotations

import random

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.common import check_num_programs, lognormal_int, with_arrivals
from bench.sim.workloads.lats import CHILDREN, MIN_TOKENS, OUTPUT_MAX, OUTPUT_MEAN, OUTPUT_SIGMA

WORKLOAD = "lats_stop"
SUCCESS = 0.067  # an iteration finds the solution: fitted to 160 calls per program
MAX_ITERATIONS = 50  # LATS's iteration budget (lats_search's default)
MAX_DEPTH = 7  # LATS's depth limit
TASK_MEAN, TASK_SIGMA, TASK_MAX = 160.0, 0.5, 2048  # instructions + question (assumed)
OBSERVATION_MEAN, OBSERVATION_SIGMA, OBSERVATION_MAX = 60.0, 0.8, 1024  # assumed
EVAL_TOKENS = 40  # "evaluate this trajectory" instruction
REFLECT_TOKENS = 60  # "reflect and select" instruction


def mean_iterations(success: float = SUCCESS, cap: int = MAX_ITERATIONS) -> float:
    """E[min(Geometric(success), cap)] = (1 - (1 - success)^cap) / success."""
    return (1 - (1 - success) ** cap) / success


def iterations_of(calls: int) -> int:
    """The iterations of a program of `calls` calls (the root, then 2 x CHILDREN + 1 each)."""
    return (calls - 1) // (2 * CHILDREN + 1)


def generate(num_programs: int, seed: int, rate: float) -> Trace:
    """`num_programs` searches with Poisson(`rate`) arrivals, deterministic per `seed`."""
    check_num_programs(num_programs)
    rng = random.Random(seed)
    programs = [TraceProgram(f"{WORKLOAD}-{i}", 0.0, _program_calls(rng), WORKLOAD)
                for i in range(num_programs)]
    return with_arrivals(programs, seed, rate)


def _iterations(rng: random.Random) -> int:
    for i in range(1, MAX_ITERATIONS):
        if rng.random() < SUCCESS:
            return i
    return MAX_ITERATIONS


def _program_calls(rng: random.Random) -> tuple[TraceCall, ...]:
    calls: list[TraceCall] = []

    def add(name: str, parents: tuple[str, ...], prompt_len: int) -> int:
        """Append a call; returns its output length."""
        output_len = lognormal_int(rng, OUTPUT_MEAN, OUTPUT_SIGMA, MIN_TOKENS, OUTPUT_MAX)
        calls.append(TraceCall(name, prompt_len, output_len, parents))
        return output_len

    def observation() -> int:
        return lognormal_int(rng, OBSERVATION_MEAN, OBSERVATION_SIGMA, MIN_TOKENS, OBSERVATION_MAX)

    task = lognormal_int(rng, TASK_MEAN, TASK_SIGMA, MIN_TOKENS, TASK_MAX)
    paths = [task + add("root", (), task)]  # paths[d]: the path prompt at depth d
    selected = "root"
    for it in range(_iterations(rng)):
        path = paths[-1]
        steps = [add(f"i{it}-expand{c}", (selected,), path) + observation() for c in range(CHILDREN)]
        evaluations = tuple(f"i{it}-eval{c}" for c in range(CHILDREN))
        for c, name in enumerate(evaluations):
            add(name, (f"i{it}-expand{c}",), path + steps[c] + EVAL_TOKENS)
        best = steps[rng.randrange(CHILDREN)]
        add(f"i{it}-reflect", evaluations, path + best + REFLECT_TOKENS)
        selected = f"i{it}-reflect"
        if len(paths) < MAX_DEPTH:
            paths.append(path + best)
        else:  # a depth-limit node: back to a shallower node of the path
            del paths[rng.randrange(MAX_DEPTH) + 1:]
    return tuple(calls)
