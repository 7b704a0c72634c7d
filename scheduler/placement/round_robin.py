"""round_robin: healthy replicas in turn, by replica index, ignoring load and programs.

The next replica is the healthy one with the smallest index above the last one chosen,
wrapping to the smallest healthy index (so a replica that leaves or joins keeps the cycle
going). O(#replicas) per call.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad, healthy


class RoundRobinPlacement(Placement):
    name = "round_robin"

    def __init__(self) -> None:
        self._last: int | None = None

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        indices = [load.replica for load in healthy(loads)]
        after = [r for r in indices if self._last is not None and r > self._last]
        self._last = min(after) if after else min(indices)
        return self._last
