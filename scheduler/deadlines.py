"""Deadlines keyed by id (a call's first token, inter-token gap or starvation; a program's
retention): one live deadline per id, popped when due; and the check of a call's own
first-token deadline (the engine, its doors and the router ask it, torch-free).

A newer `watch` of a call replaces its deadline and `forget` drops it; their old heap
entries are skipped when they come up, and once such stale entries make up more than half
of the heap it is rebuilt from the live deadlines (amortized O(1) per call), so the heap
never holds more than twice the calls watched, however many calls come and go.
"""

from __future__ import annotations

import heapq
import itertools

MAX_EXPECTED_TOOL_SECONDS = 86_400.0  # it bounds a call's first-token deadline too


def check_ttft_slo(seconds: float | None) -> float | None:
    """A call's first-token deadline (seconds after it arrives): None (the engine's default)
    or a number in (0, MAX_EXPECTED_TOOL_SECONDS], else ValueError naming ttft_slo_seconds
    (NaN included). Returns `seconds`; the doors call it off the engine thread too."""
    if seconds is not None and not (isinstance(seconds, (int, float))
                                    and 0 < seconds <= MAX_EXPECTED_TOOL_SECONDS):
        raise ValueError(f"ttft_slo_seconds must be in (0, {MAX_EXPECTED_TOOL_SECONDS:g}], "
                         f"got {seconds!r}")
    return seconds


class DeadlineWatch:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._current: dict[str, tuple[float, int]] = {}  # call -> its live (deadline, tie)
        self._tie = itertools.count()

    def __len__(self) -> int:
        """Calls with a live deadline."""
        return len(self._current)

    def __contains__(self, call_id: str) -> bool:
        return call_id in self._current

    @property
    def num_entries(self) -> int:
        """Heap entries, live and stale: at most `2 * len(self)`."""
        return len(self._heap)

    def watch(self, call_id: str, deadline: float) -> None:
        entry = (deadline, next(self._tie))
        self._current[call_id] = entry
        heapq.heappush(self._heap, (*entry, call_id))
        self._compact()

    def forget(self, call_id: str) -> None:
        if self._current.pop(call_id, None) is not None:
            self._compact()

    def due(self, now: float) -> list[str]:
        """The calls whose live deadline is at or before `now`, in deadline order (ties in
        watch order); they are no longer watched."""
        ids = []
        while self._heap and self._heap[0][0] <= now:
            deadline, tie, call_id = heapq.heappop(self._heap)
            if self._current.get(call_id) == (deadline, tie):
                del self._current[call_id]
                ids.append(call_id)
        self._compact()
        return ids

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._current):
            self._heap = [(*entry, call_id) for call_id, entry in self._current.items()]
            heapq.heapify(self._heap)
