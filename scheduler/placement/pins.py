"""Program -> replica pins, shared by the `pinned` and `cutoff` policies.

A program is pinned at its first call to the least-loaded healthy replica. The pin moves
(again to the least-loaded healthy replica) at the program's next call when its replica was
lost (`lost`; a replica that comes back under the same index is a fresh one, so old pins to it
stay void) or is unhealthy or absent from the loads of that decision; it does not move back
when the old replica recovers (the program's KV now lives at the new one). `drop` forgets a
program. O(#replicas) per call.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.base import ReplicaLoad, healthy, least_loaded


class Pins:
    def __init__(self) -> None:
        self._pins: dict[str, tuple[int, int]] = {}   # program -> (replica, replica epoch)
        self._epochs: dict[int, int] = {}             # replica -> times it was lost

    def get(self, program_id: str) -> int | None:
        """The program's pinned replica, None when it has none or its replica was lost since."""
        pin = self._pins.get(program_id)
        if pin is None or pin[1] != self._epochs.get(pin[0], 0):
            return None
        return pin[0]

    def pin(self, program_id: str, loads: Sequence[ReplicaLoad]) -> int:
        """The program's replica for this decision, (re-)pinning it when needed (see module);
        ValueError when no replica is healthy."""
        alive = healthy(loads)
        current = self.get(program_id)
        if current is not None and any(load.replica == current for load in alive):
            return current
        replica = least_loaded(alive)
        self._pins[program_id] = (replica, self._epochs.get(replica, 0))
        return replica

    def lost(self, replica: int) -> None:
        self._epochs[replica] = self._epochs.get(replica, 0) + 1

    def drop(self, program_id: str) -> None:
        self._pins.pop(program_id, None)

    def __len__(self) -> int:
        return len(self._pins)
