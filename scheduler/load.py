"""SchedulerLoad: a snapshot of what one engine's scheduler holds (torch-free; the router's
placement reads it from each replica's EngineStats)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerLoad:
    """Calls by state, queued calls per priority level (0 = highest), and the tokens behind
    them: `running_tokens` are the prompt and output tokens of running calls (their KV),
    `waiting_tokens` the tokens queued calls still have to compute before they decode."""

    calls_running: int
    calls_waiting: int
    calls_swapped: int
    programs_active: int
    queue_depths: tuple[int, ...]
    running_tokens: int
    waiting_tokens: int
