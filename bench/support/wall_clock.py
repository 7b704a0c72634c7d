"""A wall clock with the simulator's clock interface, so the simulator's driver can run the real
engine in real time (`bench.support.real_run.run_real`).

It reads `time.perf_counter() + offset`. `jump_to(t)` moves the reading forward by growing the
offset instead of sleeping: when the engine is idle the driver jumps to the next arrival, so a
run takes only its busy time while every reading (arrivals, step times the engine charges,
finish times) stays on one consistent time line. `advance` does nothing: real steps take their
own time.
"""

from __future__ import annotations

import time


class WallClock:
    """Seconds since `restart` (plus every jump). Callable, like `VirtualClock`; never goes
    back except through `restart`."""

    def __init__(self, start: float = 0.0) -> None:
        self._offset = 0.0
        self.restart(start)

    def restart(self, start: float = 0.0) -> None:
        """Read `start` now (call it just before a run: readings taken earlier do not compare
        with later ones)."""
        self._offset = start - time.perf_counter()

    @property
    def now(self) -> float:
        return time.perf_counter() + self._offset

    def __call__(self) -> float:
        return time.perf_counter() + self._offset

    def advance(self, seconds: float) -> None:
        """Nothing: real work advances a wall clock by itself."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")

    def jump_to(self, t: float) -> None:
        """Skip the idle time up to `t` if it is later (never back)."""
        gap = t - self.now
        if gap > 0:
            self._offset += gap
