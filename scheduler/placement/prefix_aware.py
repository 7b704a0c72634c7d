"""prefix_aware: the replica with the longest expected prefix-cache hit.

The router cannot see a replica's cache, so it keeps what it sent to each (`SentBlocks`:
the block hashes of the prompts, as an LRU of the replica's size; `blocks_per_replica`
overrides the size, a smaller one decays the record faster). Expected hit of a call on a
replica = the run of its leading block hashes in that record. The call goes to the healthy
replica with the longest run; ties (zero hits included) go to the least loaded
(`load_tokens`), then the lowest index. With `max_load_gap` set, replicas whose
`load_tokens` exceed the least loaded's by more than it are not considered (a guard against
one replica taking every call of a shared prefix; off by default).
O(#block_hashes + #replicas * log #block_hashes) per call, amortized.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad, healthy
from scheduler.placement.sent_blocks import SentBlocks


def _positive_or_none(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < (1 if name == "blocks_per_replica" else 0)):
        raise ValueError(f"prefix_aware: {name} must be "
                         f"{'a positive' if name == 'blocks_per_replica' else 'a non-negative'}"
                         f" int or None, got {value!r}")


class PrefixAwarePlacement(Placement):
    name = "prefix_aware"
    options = ("blocks_per_replica", "max_load_gap")

    def __init__(self, blocks_per_replica: int | None = None,
                 max_load_gap: int | None = None) -> None:
        _positive_or_none("blocks_per_replica", blocks_per_replica)
        _positive_or_none("max_load_gap", max_load_gap)
        self.max_load_gap = max_load_gap
        self.sent = SentBlocks(blocks_per_replica)

    def expected_hit(self, load: ReplicaLoad, block_hashes: Sequence[int]) -> int:
        """Blocks of the chained prefix `block_hashes` expected cached at `load.replica`."""
        return self.sent.expected_hit(load, block_hashes)

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        alive = healthy(loads)
        floor = min(load.load_tokens for load in alive)
        best, best_key = alive[0], None
        for load in alive:
            if self.max_load_gap is not None and load.load_tokens - floor > self.max_load_gap:
                continue
            key = (-self.expected_hit(load, call.block_hashes), load.load_tokens, load.replica)
            if best_key is None or key < best_key:
                best, best_key = load, key
        self.sent.send(best, call.block_hashes)
        return best.replica

    def replica_lost(self, replica: int) -> None:
        self.sent.forget(replica)
