"""Coding-agent preset `coding_swe`: a SWE-bench-style session as issue 39 describes one.

`coding` fits a long interactive session (median 43 turns with a tail to 400, contexts past
100k tokens and compacted, tool times of 1 s to minutes, median 4 s: vLLM #57103). The issue
asks for an agent whose context grows to tens of thousands of tokens over 10-60 turns and
whose tools mostly return within a second, with a tail to minutes. This preset keeps
`coding`'s calls, system prompt, replies and compaction rule and changes (`coding.Shape`):

- turns: lognormal, median TURNS_MEDIAN, clipped to [TURNS_MIN, TURNS_MAX] (10-60);
- tool results: mean TOOL_RESULT_MEAN tokens (file views and command outputs), so the median
  session ends near 40k tokens of context (10k system prompt + task + 25 replies and
  results); one in a few hundred passes `coding`'s compaction threshold;
- tool times: a mixture (`coding.ToolDelays`): FAST_SHARE of the calls are quick commands
  (a read, a grep, an edit: median FAST_MEDIAN_S), the rest test runs and builds (median
  SLOW_MEDIAN_S, spread to minutes, at most MAX_S): about 80% return within 1 s, the p99 is
  about a minute and a half;
- no subagent (a SWE-bench agent works alone).

Every figure here is an assumption shaped to the issue's description; no public
distribution of SWE-agent tool times was found.
"""

from __future__ import annotations

from typing import Any

from bench.sim.trace import Trace
from bench.sim.workloads.coding import SessionStats, Shape, ToolDelays, generate_with_stats as _coding

WORKLOAD = "coding_swe"
TURNS_MEDIAN, TURNS_SIGMA, TURNS_MIN, TURNS_MAX = 25, 0.5, 10, 60
TOOL_RESULT_MEAN = 1000.0
FAST_SHARE, FAST_MEDIAN_S, FAST_SIGMA = 0.85, 0.3, 0.8
SLOW_MEDIAN_S, SLOW_SIGMA = 15.0, 1.2
MIN_S, MAX_S = 0.05, 600.0

SWE = Shape(WORKLOAD, TURNS_MEDIAN, TURNS_SIGMA, TURNS_MIN, TURNS_MAX, TOOL_RESULT_MEAN,
            ToolDelays(SLOW_MEDIAN_S, SLOW_SIGMA, MIN_S, MAX_S, FAST_SHARE, FAST_MEDIAN_S,
                       FAST_SIGMA),
            subagent_share=0.0)


def generate(num_programs: int, seed: int, rate: float, *, tokenizer: Any = None) -> Trace:
    """`num_programs` sessions with Poisson(`rate`) arrivals, deterministic per `seed`
    (`tokenizer` accepted and unused, as `coding.generate`)."""
    return generate_with_stats(num_programs, seed, rate)[0]


def generate_with_stats(num_programs: int, seed: int,
                        rate: float) -> tuple[Trace, tuple[SessionStats, ...]]:
    """`generate`'s trace and each session's `coding.SessionStats`."""
    return _coding(num_programs, seed, rate, SWE)
