"""pinned: session affinity. Every call of a program goes to the replica it was pinned to at
its first call (the least-loaded healthy one); re-pinned as `pins.Pins` describes when that
replica is lost or unhealthy; `program_ended` drops the pin. O(#replicas) per call."""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad
from scheduler.placement.pins import Pins


class PinnedPlacement(Placement):
    name = "pinned"

    def __init__(self) -> None:
        self.pins = Pins()

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        return self.pins.pin(call.program_id, loads)

    def replica_lost(self, replica: int) -> None:
        self.pins.lost(replica)

    def program_ended(self, program_id: str) -> None:
        self.pins.drop(program_id)
