"""cutoff: the paper's cutoff rule (kept for the comparison with `agentix`, the default).

Every program is pinned at its first call to the least-loaded healthy replica (re-pinned as
`pins.Pins` describes). A call of at most `cutoff` prompt tokens (default 2,048) goes to the
least-loaded healthy replica: shared system prompts make short calls cheap anywhere. A longer
call goes to its program's pinned replica, where its long prefix is cached. With an
`AdaptiveCutoff` (`make_placement("cutoff", cutoff="auto")`) the cutoff moves with the
outcomes `observe` is told (rule in `adaptive_cutoff.py`). O(#replicas) per call.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.adaptive_cutoff import DEFAULT_CUTOFF, AdaptiveCutoff
from scheduler.placement.base import (CallOutcome, Placement, PlacementRequest, ReplicaLoad,
                                      least_loaded)
from scheduler.placement.pins import Pins


class CutoffPlacement(Placement):
    name = "cutoff"

    def __init__(self, cutoff: int | AdaptiveCutoff = DEFAULT_CUTOFF) -> None:
        if not isinstance(cutoff, AdaptiveCutoff) and (
                isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 0):
            raise ValueError(f"cutoff: cutoff must be a non-negative int or an "
                             f"AdaptiveCutoff, got {cutoff!r}")
        self.adaptive = cutoff if isinstance(cutoff, AdaptiveCutoff) else None
        self._fixed = cutoff if isinstance(cutoff, int) else DEFAULT_CUTOFF
        self.pins = Pins()

    @property
    def cutoff(self) -> int:
        return self.adaptive.cutoff if self.adaptive is not None else self._fixed

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        home = self.pins.pin(call.program_id, loads)
        return least_loaded(loads) if call.prompt_tokens <= self.cutoff else home

    def observe(self, call: PlacementRequest, outcome: CallOutcome) -> None:
        if self.adaptive is not None:
            self.adaptive.observe(call.program_id, self.pins.get(call.program_id), outcome)

    def replica_lost(self, replica: int) -> None:
        self.pins.lost(replica)
        if self.adaptive is not None:
            self.adaptive.replica_lost(replica)

    def program_ended(self, program_id: str) -> None:
        self.pins.drop(program_id)
        if self.adaptive is not None:
            self.adaptive.program_ended(program_id)
