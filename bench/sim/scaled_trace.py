"""Scale a trace down so that a small model on a CPU can run it (calibration checks, the gRPC
run): shorter prompts and outputs, fewer calls per program, optionally a stretched time axis.

`scale_trace(trace, scale=16, max_calls=8)`:
- every call's `prompt_len` and `output_len` become `max(1, floor(len / scale))` (a given
  `prompt_token_ids` is cut to its first ids);
- each program keeps its first `max_calls` calls: calls are listed in a topological order,
  so every kept call's parents are kept too and the result is a valid DAG;
- a program's shared prefix keeps its `prefix_key`; its `prefix_len` is scaled as prompt
  lengths are (so it stays >= 1), capped at the shortest kept call's scaled `prompt_len`;
- arrivals and delays are multiplied by `time_scale`.
Deterministic: no randomness, the same trace in gives the same trace out.
"""

from __future__ import annotations

import math
from dataclasses import replace

from bench.sim.trace import Trace, TraceCall, TraceProgram


def scale_trace(trace: Trace, scale: float = 16.0, max_calls: int = 8,
                time_scale: float = 1.0) -> Trace:
    """The scaled-down copy of `trace` (see the module docstring); raises ValueError for a
    `scale` below 1, a `max_calls` below 1 or a negative `time_scale`."""
    if not (scale >= 1 and math.isfinite(scale)):
        raise ValueError(f"scale: must be a finite number >= 1, got {scale}")
    if max_calls < 1:
        raise ValueError(f"max_calls: must be >= 1, got {max_calls}")
    if not (time_scale >= 0 and math.isfinite(time_scale)):
        raise ValueError(f"time_scale: must be finite and >= 0, got {time_scale}")
    return Trace(tuple(_scale_program(p, scale, max_calls, time_scale) for p in trace.programs))


def scaled_len(n: int, scale: float) -> int:
    return max(1, math.floor(n / scale))


def _scale_program(program: TraceProgram, scale: float, max_calls: int,
                   time_scale: float) -> TraceProgram:
    calls = tuple(_scale_call(c, scale, time_scale) for c in program.calls[:max_calls])
    prefix_len = (min(scaled_len(program.prefix_len, scale), *(c.prompt_len for c in calls))
                  if program.prefix_key else 0)
    return replace(program, arrival=program.arrival * time_scale, calls=calls,
                   prefix_len=prefix_len)


def _scale_call(call: TraceCall, scale: float, time_scale: float) -> TraceCall:
    prompt_len = scaled_len(call.prompt_len, scale)
    ids = call.prompt_token_ids[:prompt_len] if call.prompt_token_ids is not None else None
    return replace(call, prompt_len=prompt_len, output_len=scaled_len(call.output_len, scale),
                   delay=call.delay * time_scale, prompt_token_ids=ids)
