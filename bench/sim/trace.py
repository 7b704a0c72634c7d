"""The benchmark trace format: programs (DAGs of LLM calls) arriving over time.

A `Trace` is what a workload generator produces and what the benchmark drivers replay. Each
`TraceProgram` arrives at `arrival` seconds and consists of calls listed in a topological order:
a call may start once all of its `parents` have finished and then its `delay` (external tool
time) has passed. Saved as JSON: `{"version": 1, "programs": [...]}`; a load gives back an equal
`Trace`.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACE_VERSION = 1


@dataclass(frozen=True)
class TraceCall:
    """One LLM call. `prompt_token_ids`, when given, has exactly `prompt_len` ids.
    `segment`: which of its program's contexts the prompt continues (after the program's
    shared prefix): 0 the main one; a new one after a context compaction or for a subagent,
    whose prompts share nothing with the other segments' (a replay makes up their ids)."""

    call_id: str
    prompt_len: int
    output_len: int
    parents: tuple[str, ...] = ()
    delay: float = 0.0
    prompt_token_ids: tuple[int, ...] | None = None
    segment: int = 0

    def __post_init__(self) -> None:
        if not self.call_id:
            raise ValueError("call_id: must be a non-empty string")
        if self.prompt_len < 1:
            raise ValueError(f"prompt_len: must be >= 1, got {self.prompt_len} (call {self.call_id})")
        if self.output_len < 1:
            raise ValueError(f"output_len: must be >= 1, got {self.output_len} (call {self.call_id})")
        if not (self.delay >= 0.0 and math.isfinite(self.delay)):
            raise ValueError(f"delay: must be finite and >= 0, got {self.delay} (call {self.call_id})")
        if self.segment < 0:
            raise ValueError(f"segment: must be >= 0, got {self.segment} (call {self.call_id})")
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) != self.prompt_len:
            raise ValueError(
                f"prompt_token_ids: has {len(self.prompt_token_ids)} ids, prompt_len is {self.prompt_len}"
                f" (call {self.call_id})"
            )


@dataclass(frozen=True)
class TraceProgram:
    """A program: its calls in topological order (every parent is listed before its child).

    `prefix_key`/`prefix_len`: the first `prefix_len` prompt tokens of every call are the same
    for all programs with the same key (a shared system prompt, e.g. the same tool docs), so a
    replay can make them identical and let the prefix cache share them across programs."""

    program_id: str
    arrival: float
    calls: tuple[TraceCall, ...]
    workload: str
    prefix_key: str | None = None
    prefix_len: int = 0

    def __post_init__(self) -> None:
        if not (self.arrival >= 0.0 and math.isfinite(self.arrival)):
            raise ValueError(f"arrival: must be finite and >= 0, got {self.arrival} (program {self.program_id})")
        if not self.calls:
            raise ValueError(f"calls: program {self.program_id} has no calls")
        if self.prefix_len < 0 or (self.prefix_len > 0) != bool(self.prefix_key):
            raise ValueError(f"prefix_len: must be > 0 exactly when prefix_key is set, got "
                             f"{self.prefix_len} with key {self.prefix_key!r} (program {self.program_id})")
        shortest = min(c.prompt_len for c in self.calls)
        if self.prefix_len > shortest:
            raise ValueError(f"prefix_len: {self.prefix_len} exceeds the shortest prompt "
                             f"({shortest}) of program {self.program_id}")
        seen: set[str] = set()
        for call in self.calls:
            if call.call_id in seen:
                raise ValueError(f"calls: duplicate call_id {call.call_id!r} in program {self.program_id}")
            for parent in call.parents:
                if parent not in seen:
                    raise ValueError(
                        f"parents: call {call.call_id!r} of program {self.program_id} names {parent!r},"
                        " which is not an earlier call"
                    )
            if len(set(call.parents)) != len(call.parents):
                raise ValueError(f"parents: call {call.call_id!r} lists a parent twice")
            seen.add(call.call_id)


@dataclass(frozen=True)
class Trace:
    programs: tuple[TraceProgram, ...]

    def __post_init__(self) -> None:
        ids = [p.program_id for p in self.programs]
        if len(set(ids)) != len(ids):
            raise ValueError("programs: program ids must be unique")


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """`n` arrival times of a Poisson process of `rate` programs/s: cumulative exponential gaps
    drawn from `random.Random(seed)`, the first arrival being the first gap. `rate == inf` gives
    all zeros (offline: everything arrives at once)."""
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    if not rate > 0:
        raise ValueError(f"rate: must be > 0, got {rate}")
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    t = 0.0
    arrivals = []
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    return arrivals


def save_trace(trace: Trace, path: str | Path) -> None:
    Path(path).write_text(json.dumps(_trace_to_json(trace)))


def load_trace(path: str | Path) -> Trace:
    """Raises ValueError for an unknown version or an invalid program."""
    data = json.loads(Path(path).read_text())
    if data.get("version") != TRACE_VERSION:
        raise ValueError(f"version: expected {TRACE_VERSION}, got {data.get('version')!r}")
    return Trace(tuple(_program_from_json(p) for p in data["programs"]))


def _trace_to_json(trace: Trace) -> dict[str, Any]:
    return {
        "version": TRACE_VERSION,
        "programs": [
            {
                "program_id": p.program_id,
                "arrival": p.arrival,
                "workload": p.workload,
                **({"prefix_key": p.prefix_key, "prefix_len": p.prefix_len} if p.prefix_key else {}),
                "calls": [_call_to_json(c) for c in p.calls],
            }
            for p in trace.programs
        ],
    }


def _call_to_json(call: TraceCall) -> dict[str, Any]:
    out: dict[str, Any] = {
        "call_id": call.call_id,
        "prompt_len": call.prompt_len,
        "output_len": call.output_len,
        "parents": list(call.parents),
        "delay": call.delay,
    }
    if call.prompt_token_ids is not None:
        out["prompt_token_ids"] = list(call.prompt_token_ids)
    if call.segment:
        out["segment"] = call.segment
    return out


def _program_from_json(p: dict[str, Any]) -> TraceProgram:
    calls = tuple(
        TraceCall(
            call_id=c["call_id"],
            prompt_len=c["prompt_len"],
            output_len=c["output_len"],
            parents=tuple(c.get("parents", ())),
            delay=c.get("delay", 0.0),
            prompt_token_ids=tuple(c["prompt_token_ids"]) if c.get("prompt_token_ids") is not None else None,
            segment=c.get("segment", 0),
        )
        for c in p["calls"]
    )
    return TraceProgram(p["program_id"], p["arrival"], calls, p["workload"],
                        p.get("prefix_key"), p.get("prefix_len", 0))
