"""least_loaded: every call to the healthy replica with the fewest `load_tokens` (running
calls' KV tokens plus queued calls' tokens still to compute; lowest index on ties).
O(#replicas) per call."""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad, least_loaded


class LeastLoadedPlacement(Placement):
    name = "least_loaded"

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        return least_loaded(loads)
