"""Map-reduce (fan-out) workload `mapreduce`: a lead agent plans, N workers run in parallel,
a reducer joins their reports: the orchestrator-worker pattern of a research agent.

The other workloads fan out little (`lats`: 5 identical branches per iteration; `coding`: one
subagent in 44% of the sessions). Figures from Anthropic Engineering, "How we built our
multi-agent research system" (2025-06-13): the lead agent scales the effort to the query:
simple fact-finding takes 1 agent with 3-10 tool calls, direct comparisons 2-4 subagents
with 10-15 calls each, complex research more than 10 subagents; the lead spins up 3-5
subagents in parallel. Here a program is of one of those classes (CLASSES: the share of each
is an assumption, as are the token counts and tool times below):

- "plan": the lead's first call; prompt = the shared system prompt (tool docs, `prefix_key`
  PREFIX_KEY, SYSTEM_TOKENS) + the query; output = the plan.
- "w{i}-{j}": worker i's j-th call (its own context, `TraceCall.segment` i + 1): the first
  follows the plan at once with prompt = system prompt + its brief; each later one follows
  the previous after a tool time (a search or a page fetch) with prompt = the previous prompt
  + its output + the tool result. A worker's calls are uniform in its class's range; its last
  output is its report.
- "reduce": parents the last call of every worker; prompt = the plan's prompt and output +
  every report + REDUCE_TOKENS of instructions; output = the answer.

Workers per program (N): 1, uniform 2-4, or uniform 11-16 by class; mean 4.5 (`mean_workers`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.common import check_num_programs, lognormal_int, with_arrivals

WORKLOAD = "mapreduce"
PREFIX_KEY = "research-tools"
SYSTEM_TOKENS = 4000  # the agents' shared system prompt (tool docs)


@dataclass(frozen=True)
class TaskClass:
    """A query class: its share of programs, workers per program and calls per worker
    (inclusive ranges, drawn uniformly)."""

    name: str
    share: float
    workers: tuple[int, int]
    calls: tuple[int, int]


CLASSES = (TaskClass("simple", 0.3, (1, 1), (3, 10)),
           TaskClass("comparison", 0.5, (2, 4), (10, 15)),
           TaskClass("complex", 0.2, (11, 16), (10, 15)))
QUERY_MEAN, QUERY_SIGMA = 200.0, 0.6
PLAN_MEAN, PLAN_SIGMA = 400.0, 0.5
BRIEF_MEAN, BRIEF_SIGMA = 300.0, 0.5
STEP_MEAN, STEP_SIGMA = 150.0, 0.7  # a worker's reply and tool call
RESULT_MEAN, RESULT_SIGMA, RESULT_MAX = 1500.0, 0.8, 8192  # a search result or a page, trimmed
REPORT_MEAN, REPORT_SIGMA = 800.0, 0.5
ANSWER_MEAN, ANSWER_SIGMA = 1000.0, 0.5
REDUCE_TOKENS = 200
TOOL_MEDIAN_S, TOOL_SIGMA, TOOL_MAX_S = 1.5, 0.8, 60.0  # a search or a fetch
MIN_TOKENS, MAX_OUTPUT = 10, 4096


def mean_workers() -> float:
    """Workers per program in expectation: sum over classes of share x mean of its range."""
    return sum(c.share * (c.workers[0] + c.workers[1]) / 2 for c in CLASSES)


def workers_of(program: TraceProgram) -> int:
    """How many workers `program` (of this generator) ran: the reducer's parents."""
    return len(program.calls[-1].parents)


def generate(num_programs: int, seed: int, rate: float) -> Trace:
    """`num_programs` programs with Poisson(`rate`) arrivals, deterministic per `seed`."""
    check_num_programs(num_programs)
    rng = random.Random(seed)
    programs = [TraceProgram(f"{WORKLOAD}-{i}", 0.0, _program_calls(rng), WORKLOAD,
                             prefix_key=PREFIX_KEY, prefix_len=SYSTEM_TOKENS)
                for i in range(num_programs)]
    return with_arrivals(programs, seed, rate)


def _task_class(rng: random.Random) -> TaskClass:
    pick, total = rng.random(), 0.0
    for task in CLASSES:
        total += task.share
        if pick < total:
            return task
    return CLASSES[-1]


def _program_calls(rng: random.Random) -> tuple[TraceCall, ...]:
    def tokens(mean: float, sigma: float, maximum: int = MAX_OUTPUT) -> int:
        return lognormal_int(rng, mean, sigma, MIN_TOKENS, maximum)

    task = _task_class(rng)
    plan_prompt = SYSTEM_TOKENS + tokens(QUERY_MEAN, QUERY_SIGMA)
    plan = TraceCall("plan", plan_prompt, tokens(PLAN_MEAN, PLAN_SIGMA))
    calls, reports, lasts = [plan], 0, []
    for i in range(rng.randint(*task.workers)):
        n = rng.randint(*task.calls)
        prompt, parent, delay = SYSTEM_TOKENS + tokens(BRIEF_MEAN, BRIEF_SIGMA), "plan", 0.0
        for j in range(n):
            last = j == n - 1
            output = tokens(REPORT_MEAN, REPORT_SIGMA) if last else tokens(STEP_MEAN, STEP_SIGMA)
            calls.append(TraceCall(f"w{i}-{j}", prompt, output, (parent,), delay, segment=i + 1))
            parent = calls[-1].call_id
            prompt += output + tokens(RESULT_MEAN, RESULT_SIGMA, RESULT_MAX)
            delay = min(rng.lognormvariate(math.log(TOOL_MEDIAN_S), TOOL_SIGMA), TOOL_MAX_S)
        reports += calls[-1].output_len
        lasts.append(parent)
    reduce_prompt = plan.prompt_len + plan.output_len + reports + REDUCE_TOKENS
    calls.append(TraceCall("reduce", reduce_prompt, tokens(ANSWER_MEAN, ANSWER_SIGMA), tuple(lasts)))
    return tuple(calls)
