"""Anti-starvation: promote a waiting call to the top queue when
`(W_program + W_call) / (T_program + T_call) >= beta`.

While a call waits, only its own W grows (by the clock), so the moment its ratio will cross
beta is known; deadlines sit in a heap and each round pops only the due ones, re-checking the
exact ratio (a program's W and T may have moved since) before promoting.
"""

from __future__ import annotations

import heapq
import itertools

from scheduler.process_table import CallRecord, ProgramRecord


def starvation_ratio(program: ProgramRecord, call: CallRecord, now: float) -> float:
    waited = call.wait + (now - call.waiting_since if call.waiting_since is not None else 0.0)
    served = program.service + call.service
    w = program.wait + waited
    return float("inf") if served <= 0 else w / served


def crossing_time(program: ProgramRecord, call: CallRecord, beta: float) -> float:
    """When a call waiting since `call.waiting_since` reaches the ratio beta."""
    since = call.waiting_since if call.waiting_since is not None else 0.0
    gap = beta * (program.service + call.service) - (program.wait + call.wait)
    return since + max(0.0, gap)


class StarvationWatch:
    """Deadlines of waiting calls; `due(now)` yields call ids whose deadline has passed."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._tie = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def watch(self, call_id: str, deadline: float) -> None:
        heapq.heappush(self._heap, (deadline, next(self._tie), call_id))

    def due(self, now: float) -> list[str]:
        ids = []
        while self._heap and self._heap[0][0] <= now:
            ids.append(heapq.heappop(self._heap)[2])
        return ids
