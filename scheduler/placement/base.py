"""The placement interface: given a call and the replicas' reported load, pick a replica.

The same code runs in the router (server/router/) and in the multi-engine simulator
(bench/sim/multi_sim.py). Torch-free. A policy is one `Placement` subclass in one file of this
package, registered in `scheduler/placement/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Collection, Sequence


@dataclass(frozen=True)
class ReplicaLoad:
    """What one replica reports (its EngineStats) at the time of a decision.

    The load measure is `load_tokens`: the tokens of running calls (their KV, what the
    replica works on) plus the tokens queued calls still have to compute. A replica that is
    not `healthy` is never chosen.
    """

    replica: int
    healthy: bool = True
    running_tokens: int = 0
    waiting_tokens: int = 0
    calls_running: int = 0
    calls_waiting: int = 0
    kv_blocks_free: int = 0   # free plus cached (evictable) device blocks
    kv_blocks_total: int = 1
    # The low 64 bits (`kvcache.cache_events.wire_hash`) of the block hashes its prefix
    # cache holds, from its KV events (None: not known; placement then guesses).
    cached: Collection[int] | None = field(default=None, compare=False, repr=False)

    @property
    def load_tokens(self) -> int:
        return self.running_tokens + self.waiting_tokens


@dataclass(frozen=True)
class PlacementRequest:
    """A call to place: its program, its prompt length in tokens, and the chained hashes of
    its prompt's full blocks of `block_size` tokens (`kvcache.prefix_hash.hash_block`,
    empty when unknown)."""

    program_id: str
    prompt_tokens: int
    block_hashes: tuple[int, ...] = ()
    block_size: int = 16


@dataclass(frozen=True)
class CallOutcome:
    """What the replica reported for a finished call (its usage): the tokens its prefix
    cache served and the seconds the call waited; `batch_calls` is the replica's running
    calls in its latest reported load (the batch a prefill there stalls)."""

    replica: int
    prompt_tokens: int
    cached_tokens: int
    queue_seconds: float
    batch_calls: int = 0


class Placement(ABC):
    """One placement policy's state and decisions (one instance per router or simulation).

    Contract: `place` returns the `replica` field of one of the healthy `loads` (ValueError
    when none is healthy); it may record state (pins, hashes sent). `observe` is told each
    finished call's outcome; `replica_lost` that a replica died (its pins must move);
    `program_ended` that a program's state may be dropped.
    """

    name: ClassVar[str] = ""
    # The keyword options its constructor takes (what `make_placement` accepts for it).
    options: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int: ...

    def observe(self, call: PlacementRequest, outcome: CallOutcome) -> None:
        return None

    def replica_lost(self, replica: int) -> None:
        return None

    def program_ended(self, program_id: str) -> None:
        return None


def healthy(loads: Sequence[ReplicaLoad]) -> list[ReplicaLoad]:
    """The healthy replicas (ValueError naming the problem when there is none)."""
    alive = [load for load in loads if load.healthy]
    if not alive:
        raise ValueError("placement: no healthy replica")
    return alive


def least_loaded(loads: Sequence[ReplicaLoad]) -> int:
    """The healthy replica with the fewest load tokens (lowest replica index on ties)."""
    return min(healthy(loads), key=lambda load: (load.load_tokens, load.replica)).replica
