"""Per-call deadlines (first token, inter-token gap): one current deadline per call, popped
when due.

A newer `watch` of a call replaces its deadline and `forget` drops it; their old heap
entries are skipped when they come up, so the live map never holds more than the calls
watched, and the heap only what falls due within the deadlines' horizon.
"""

from __future__ import annotations

import heapq
import itertools


class DeadlineWatch:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._current: dict[str, float] = {}
        self._tie = itertools.count()

    def __len__(self) -> int:
        """Calls with a live deadline."""
        return len(self._current)

    def watch(self, call_id: str, deadline: float) -> None:
        self._current[call_id] = deadline
        heapq.heappush(self._heap, (deadline, next(self._tie), call_id))

    def forget(self, call_id: str) -> None:
        self._current.pop(call_id, None)

    def due(self, now: float) -> list[str]:
        """The calls whose live deadline is at or before `now`, in deadline order; they are
        no longer watched."""
        ids = []
        while self._heap and self._heap[0][0] <= now:
            deadline, _, call_id = heapq.heappop(self._heap)
            if self._current.get(call_id) == deadline:
                del self._current[call_id]
                ids.append(call_id)
        return ids
