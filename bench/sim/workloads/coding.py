"""Coding-agent workload: synthetic SWE-bench / OpenHands / Claude-Code-style sessions.

A session is a tool loop: each LLM call (a *turn*) reads the whole history and emits a short
reply with a tool call; the tool runs (a file read, a grep, a test run) and its result is
appended to the history before the next turn. Token counts are drawn directly (no tokenizer;
a count stands for content plus chat-template tokens). Where each figure comes from:

- vLLM issue vllm-project/vllm #57103 (coding-agent sessions): median 43 turns, 142k input
  tokens, prefix-cache hit rate above 96%, subagents in 44% of sessions. Turns are the main
  agent's calls, as a session transcript counts them (a subagent's calls are in its own
  transcript): TURNS_MEDIAN. "142k input tokens" is read as the context a session has
  accumulated by its last turn (system prompt + task + every reply, tool result and report,
  without compaction): TOOL_RESULT_MEAN is set so that the median session's `final_context`
  is ~142k. That reading agrees with the hit rate: such a history re-read at every turn gives
  an ideal hit rate of ~98% here; with the compactions below it is ~94%. SUBAGENT_SHARE: 44%.
- Assumptions (no published distribution): the system prompt of tool schemas and instructions
  (~10k tokens, the same for every session: `prefix_key` PREFIX_KEY, `prefix_len`
  SYSTEM_PROMPT_TOKENS), the task, replies of tens to a few hundred tokens, tool results of
  hundreds to a few thousand (truncated at TOOL_RESULT_MAX, as agents truncate long outputs),
  tool times from a second (a read) to minutes (a test run), median a few seconds, and the
  subagents' sizes: all lognormal, with the constants below.

Calls (`TraceCall.parents` gives the DAG; calls are listed in a topological order):

- turn i of the main agent, "t{i}": parent its previous call; delay the tool time of the
  previous turn's tool (the first turn: 0); prompt the history so far.
- compaction, "t{i}-compact": a call may span MAX_CONTEXT tokens (Llama-3.1's 128k), so a
  thread whose next prompt would pass COMPACT_AT (~80% of it) first summarizes: one call with
  prompt = the history + SUMMARY_INSTRUCTION_TOKENS and output = a SUMMARY_MIN..SUMMARY_MAX
  token summary; the thread goes on from the system prompt + that summary. This is what
  Claude Code's auto-compact and OpenHands' LLM-summarizing condenser do (dropping old tool
  results or turns instead would break the prefix as well). COMPACT_AT leaves room for one
  more reply, tool result and report, then the summary, so no prompt exceeds PROMPT_CAP and
  no call MAX_CONTEXT. After a compaction only the system prompt is a prefix of the earlier
  prompts; the trace shows it only as a shorter `prompt_len`.
- subagent, "s{j}" (and "s{j}-compact"), in SUBAGENT_SHARE of the sessions, one each: after
  main turn k (uniform) the agent delegates a task to a subagent, a thread with its own fresh
  context (system prompt + a SUBAGENT_TASK token task; its first call's parent is turn k,
  delay 0) that runs its own turns in parallel with the main thread and ends with a report
  (its last call's output). The report joins the main thread at the first main turn that
  would start after the subagent ends, estimated from the drawn tool times and
  CALL_SECONDS_ESTIMATE per call (at the latest, the last turn): that turn, or its compaction
  call, has two parents (the main thread's previous call and the subagent's last call) and its
  prompt grows by the report. A replay starts it once both have finished and its tool time has
  passed since the later of them.

`Shape` holds what a preset changes (turns, tool results and times, subagents): `CODING`
is the one above; `bench.sim.workloads.coding_swe` is a shorter SWE-bench-style preset.

Each context is its own `TraceCall.segment`: the main thread's starts at 0, a subagent's
gets a new one, and so does a thread after each compaction; a replay (`bench.sim.simulate`'s
`PromptMaker`) gives each segment its own made-up ids after the shared system prompt, so the
summary and a subagent's task and history are prefilled as new text, as they are for real.
"""
from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.common import check_num_programs, lognormal_int, with_arrivals

WORKLOAD = "coding"
PREFIX_KEY = "coding-tools"  # all sessions share the same system prompt (tool schemas)

MAX_CONTEXT = 131_072  # tokens a call may span (prompt + output): Llama-3.1's 128k window
SYSTEM_PROMPT_TOKENS = 10_000  # tool schemas + instructions, shared by all sessions (~8-12k)
TASK_MEAN, TASK_SIGMA, TASK_MIN, TASK_MAX = 1500.0, 0.6, 100, 8000  # issue text + repo context

TURNS_MEDIAN = 43  # main-agent turns per session, median (vLLM #57103)
TURNS_SIGMA = 0.8  # lognormal spread of turns: heavy-tailed, p90 about 120
TURNS_MIN, TURNS_MAX = 3, 400  # clipping keeps the median

OUTPUT_MEAN, OUTPUT_SIGMA, OUTPUT_MIN, OUTPUT_MAX = 150.0, 0.8, 10, 1024  # reply + tool call
TOOL_RESULT_MEAN = 3300.0  # tokens a tool result adds, mean: makes the median final context ~142k
TOOL_RESULT_SIGMA, TOOL_RESULT_MIN, TOOL_RESULT_MAX = 1.1, 20, 12_288  # max: tools truncate
TOOL_DELAY_MEDIAN_S = 4.0  # seconds a tool runs (the next call's delay), median
TOOL_DELAY_SIGMA = 1.1  # lognormal spread: p99 about 50 s
TOOL_DELAY_MIN_S, TOOL_DELAY_MAX_S = 1.0, 300.0  # a quick read .. a long test run

SUMMARY_INSTRUCTION_TOKENS = 512  # the "summarize the conversation" request of a compaction
SUMMARY_MEAN, SUMMARY_SIGMA, SUMMARY_MIN, SUMMARY_MAX = 6000.0, 0.25, 4000, 8192  # its output
PROMPT_CAP = MAX_CONTEXT - SUMMARY_MAX  # longest prompt: room for the longest output (summary)

SUBAGENT_SHARE = 0.44  # sessions that spawn one subagent (vLLM #57103)
SUBAGENT_TASK_MEAN, SUBAGENT_TASK_SIGMA, SUBAGENT_TASK_MIN, SUBAGENT_TASK_MAX = 500.0, 0.5, 50, 4000
SUBAGENT_TURNS_MEDIAN = 12  # a subagent's turns, median (assumption: a focused search or fix)
SUBAGENT_TURNS_SIGMA, SUBAGENT_TURNS_MIN, SUBAGENT_TURNS_MAX = 0.6, 2, 100
REPORT_MEAN, REPORT_SIGMA, REPORT_MIN, REPORT_MAX = 1000.0, 0.5, 100, 4096  # subagent's last output
CALL_SECONDS_ESTIMATE = 2.0  # an LLM call's latency, only to place a subagent's join

# A thread compacts before a call whose prompt would pass COMPACT_AT: the previous prompt was
# at most COMPACT_AT and one step adds at most a reply, a tool result and a report, so the
# summarization prompt stays within PROMPT_CAP. It comes to about 80% of the window.
COMPACT_AT = PROMPT_CAP - SUMMARY_INSTRUCTION_TOKENS - OUTPUT_MAX - TOOL_RESULT_MAX - REPORT_MAX


@dataclass(frozen=True)
class ToolDelays:
    """Tool time (a turn's delay after its previous turn), in seconds: with probability
    `fast_share` a lognormal of median `fast_median` and spread `fast_sigma` (a read, a grep,
    an edit), else one of `slow_median`, `slow_sigma` (a test run, a build); clipped to
    [`minimum`, `maximum`]. A `fast_share` of 0 draws one lognormal variate per delay."""

    slow_median: float
    slow_sigma: float
    minimum: float
    maximum: float
    fast_share: float = 0.0
    fast_median: float = 1.0
    fast_sigma: float = 1.0

    def __post_init__(self) -> None:
        for name in ("slow_median", "slow_sigma", "fast_median", "fast_sigma", "maximum"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if not 0 <= self.minimum <= self.maximum:
            raise ValueError(f"minimum: must be in [0, maximum], got {self.minimum}")
        if not 0 <= self.fast_share <= 1:
            raise ValueError(f"fast_share: must be in [0, 1], got {self.fast_share}")

    def draw(self, rng: random.Random) -> float:
        fast = self.fast_share > 0 and rng.random() < self.fast_share
        median, sigma = ((self.fast_median, self.fast_sigma) if fast
                         else (self.slow_median, self.slow_sigma))
        return min(max(rng.lognormvariate(math.log(median), sigma), self.minimum), self.maximum)


@dataclass(frozen=True)
class Shape:
    """What a coding preset draws differently: the workload's name, main-agent turns
    (lognormal median, spread, clipping), the mean tool-result tokens, tool times and the
    share of sessions with a subagent."""

    workload: str
    turns_median: int
    turns_sigma: float
    turns_min: int
    turns_max: int
    tool_result_mean: float
    tool_delays: ToolDelays
    subagent_share: float

    def __post_init__(self) -> None:
        if not 2 <= self.turns_min <= self.turns_median <= self.turns_max:
            raise ValueError(f"turns_median: need 2 <= turns_min <= turns_median <= turns_max, "
                             f"got {self.turns_min}, {self.turns_median}, {self.turns_max}")
        if not self.turns_sigma > 0:
            raise ValueError(f"turns_sigma: must be > 0, got {self.turns_sigma}")
        if not self.tool_result_mean >= TOOL_RESULT_MIN:
            raise ValueError(f"tool_result_mean: must be >= {TOOL_RESULT_MIN}, got "
                             f"{self.tool_result_mean}")
        if not 0 <= self.subagent_share <= 1:
            raise ValueError(f"subagent_share: must be in [0, 1], got {self.subagent_share}")


CODING = Shape(WORKLOAD, TURNS_MEDIAN, TURNS_SIGMA, TURNS_MIN, TURNS_MAX, TOOL_RESULT_MEAN,
               ToolDelays(TOOL_DELAY_MEDIAN_S, TOOL_DELAY_SIGMA, TOOL_DELAY_MIN_S,
                          TOOL_DELAY_MAX_S),
               SUBAGENT_SHARE)


@dataclass(frozen=True)
class SessionStats:
    """What a generated session was drawn to be, beside its calls.

    `turns`: main-agent turns (compaction and subagent calls not counted). `final_context`:
    the main thread's history at its last turn without compaction (what a model with an
    unbounded window would read). `prompt_tokens` / `reusable_tokens`: all prompts' tokens and
    how many of them an ideal prefix cache would hold (the thread's previous prompt and output,
    or only the system prompt after a compaction and at a thread's start)."""

    turns: int
    final_context: int
    compactions: int
    subagent_turns: int
    prompt_tokens: int
    reusable_tokens: int


def generate(num_programs: int, seed: int, rate: float, *, tokenizer: Any = None) -> Trace:
    """`num_programs` coding sessions with Poisson(`rate`) arrivals, deterministic per `seed`.
    `tokenizer` is accepted like the other generators' and unused (counts are drawn)."""
    return generate_with_stats(num_programs, seed, rate)[0]


def generate_with_stats(num_programs: int, seed: int, rate: float, shape: Shape = CODING,
                        ) -> tuple[Trace, tuple[SessionStats, ...]]:
    """`generate`'s trace (of the preset `shape`) and each program's `SessionStats`, in
    program order."""
    check_num_programs(num_programs)
    rng = random.Random(seed)
    sessions = [_session(f"{shape.workload}-{i}", rng, shape) for i in range(num_programs)]
    trace = with_arrivals([program for program, _ in sessions], seed, rate)
    return trace, tuple(stats for _, stats in sessions)


@dataclass(frozen=True)
class _Steps:
    """A thread's draws: reply lengths per turn, the tool result and tool time after each turn
    but the last."""

    outputs: tuple[int, ...]
    results: tuple[int, ...]
    delays: tuple[float, ...]

    def delay_before(self, i: int) -> float:
        return self.delays[i - 1] if i else 0.0

    def result_after(self, i: int) -> int:
        return self.results[i] if i < len(self.results) else 0


def _draw_steps(rng: random.Random, turns: int, shape: Shape) -> _Steps:
    outputs = tuple(lognormal_int(rng, OUTPUT_MEAN, OUTPUT_SIGMA, OUTPUT_MIN, OUTPUT_MAX) for _ in range(turns))
    results = tuple(lognormal_int(rng, shape.tool_result_mean, TOOL_RESULT_SIGMA, TOOL_RESULT_MIN,
                                  TOOL_RESULT_MAX) for _ in range(turns - 1))
    delays = tuple(shape.tool_delays.draw(rng) for _ in range(turns - 1))
    return _Steps(outputs, results, delays)


def _median_int(rng: random.Random, median: int, sigma: float, minimum: int, maximum: int) -> int:
    """`lognormal_int` parameterized by its median (the clipping keeps it)."""
    return lognormal_int(rng, median * math.exp(sigma * sigma / 2), sigma, minimum, maximum)


class _Thread:
    """One agent context (the main agent's or a subagent's) appending its calls to a shared
    list: tracks the next prompt's length, compacts before a call that would pass COMPACT_AT,
    and counts prompt and reusable tokens."""

    def __init__(self, rng: random.Random, calls: list[TraceCall], name: str, start: int,
                 segments: Iterator[int]) -> None:
        self.rng, self.calls, self.name, self.segments = rng, calls, name, segments
        self.segment = next(segments)  # the context its calls' prompts continue
        self.context = start  # the next prompt's length
        self.uncompacted = start
        self.cached = SYSTEM_PROMPT_TOKENS  # leading tokens of the next prompt already computed
        self.last: str | None = None  # the thread's last call id
        self.turns = self.compactions = self.prompt_tokens = self.reusable_tokens = 0

    def grow(self, tokens: int) -> None:
        self.context += tokens
        self.uncompacted += tokens

    def turn(self, i: int, output_len: int, parents: tuple[str, ...], delay: float,
             tool_result: int) -> None:
        """Append turn `i` (after a compaction call when needed; `parents` and `delay` go to
        the first call appended), then its reply and `tool_result` (0: none) to the history."""
        if self.context > COMPACT_AT:
            summary = lognormal_int(self.rng, SUMMARY_MEAN, SUMMARY_SIGMA, SUMMARY_MIN, SUMMARY_MAX)
            self._append(f"{self.name}{i}-compact", self.context + SUMMARY_INSTRUCTION_TOKENS, summary,
                         parents, delay)
            self.compactions += 1
            self.context = SYSTEM_PROMPT_TOKENS + summary
            self.cached = SYSTEM_PROMPT_TOKENS
            self.segment = next(self.segments)
            parents, delay = (self.calls[-1].call_id,), 0.0
        self._append(f"{self.name}{i}", self.context, output_len, parents, delay)
        self.turns += 1
        self.grow(output_len + tool_result)

    def _append(self, call_id: str, prompt_len: int, output_len: int, parents: tuple[str, ...],
                delay: float) -> None:
        self.calls.append(TraceCall(call_id, prompt_len, output_len, parents, delay,
                                    segment=self.segment))
        self.prompt_tokens += prompt_len
        self.reusable_tokens += min(self.cached, prompt_len)
        self.cached = prompt_len + output_len
        self.last = call_id


def _session(program_id: str, rng: random.Random, shape: Shape) -> tuple[TraceProgram, SessionStats]:
    turns = _median_int(rng, shape.turns_median, shape.turns_sigma, shape.turns_min, shape.turns_max)
    steps = _draw_steps(rng, turns, shape)
    task = lognormal_int(rng, TASK_MEAN, TASK_SIGMA, TASK_MIN, TASK_MAX)
    spawn_after = rng.randrange(turns - 1) if rng.random() < shape.subagent_share else None
    calls: list[TraceCall] = []
    segments = itertools.count()
    main = _Thread(rng, calls, "t", SYSTEM_PROMPT_TOKENS + task, segments)
    sub: _Subagent | None = None
    join_at = -1  # the main turn that reads the subagent's report
    for i in range(turns):
        parents = (main.last,) if main.last else ()
        if sub is not None and i == join_at:
            main.grow(sub.report)
            parents += (sub.thread.last,)
        final_context = main.uncompacted
        main.turn(i, steps.outputs[i], parents, steps.delay_before(i), steps.result_after(i))
        if i == spawn_after:
            sub = _subagent(rng, calls, main.last, segments, shape)
            join_at = _join_turn(steps.delays, i, sub.seconds)
    threads = [main] if sub is None else [main, sub.thread]
    stats = SessionStats(
        turns=turns,
        final_context=final_context,
        compactions=sum(t.compactions for t in threads),
        subagent_turns=sub.thread.turns if sub else 0,
        prompt_tokens=sum(t.prompt_tokens for t in threads),
        reusable_tokens=sum(t.reusable_tokens for t in threads),
    )
    program = TraceProgram(program_id, 0.0, tuple(calls), shape.workload, prefix_key=PREFIX_KEY,
                           prefix_len=SYSTEM_PROMPT_TOKENS)
    return program, stats


@dataclass(frozen=True)
class _Subagent:
    """A subagent's thread once laid out, its estimated duration (from its spawn to its last
    call's end) and its report's length (its last call's output)."""

    thread: _Thread
    seconds: float
    report: int


def _subagent(rng: random.Random, calls: list[TraceCall], spawner: str,
              segments: Iterator[int], shape: Shape) -> _Subagent:
    """Lay out a subagent spawned by call `spawner`: its first call follows it at once."""
    turns = _median_int(rng, SUBAGENT_TURNS_MEDIAN, SUBAGENT_TURNS_SIGMA, SUBAGENT_TURNS_MIN, SUBAGENT_TURNS_MAX)
    steps = _draw_steps(rng, turns, shape)
    task = lognormal_int(rng, SUBAGENT_TASK_MEAN, SUBAGENT_TASK_SIGMA, SUBAGENT_TASK_MIN, SUBAGENT_TASK_MAX)
    report = lognormal_int(rng, REPORT_MEAN, REPORT_SIGMA, REPORT_MIN, REPORT_MAX)
    thread = _Thread(rng, calls, "s", SYSTEM_PROMPT_TOKENS + task, segments)
    for j in range(turns):
        parents = (thread.last,) if thread.last else (spawner,)
        output_len = report if j == turns - 1 else steps.outputs[j]
        thread.turn(j, output_len, parents, steps.delay_before(j), steps.result_after(j))
    return _Subagent(thread, sum(steps.delays) + turns * CALL_SECONDS_ESTIMATE, report)


def _join_turn(delays: tuple[float, ...], spawn_after: int, seconds: float) -> int:
    """The first main turn after `spawn_after` that would start `seconds` or more after the
    spawning turn ends (its tool times and CALL_SECONDS_ESTIMATE per turn between), else the
    last turn: the turn that reads the subagent's report."""
    elapsed = 0.0
    for j in range(spawn_after + 1, len(delays) + 1):
        elapsed += delays[j - 1]
        if elapsed >= seconds:
            return j
        elapsed += CALL_SECONDS_ESTIMATE
    return len(delays)
