"""prefix_aware: the replica with the longest expected prefix-cache hit.

The router cannot see a replica's cache, so it keeps, per replica, a record of the block
hashes it has sent there (`PlacementRequest.block_hashes`, chained `hash_block` hashes), in
recency order and capped at the replica's KV block count (`blocks_per_replica`, default the
`kv_blocks_total` of that replica's load at each decision). Sending a call there touches its
hashes last block first, so a prompt's first blocks are the most recent and the record evicts
its oldest entries, a prompt's tail before its head, as an LRU cache of that size turns over:
a replica that has since been sent `blocks_per_replica` other blocks has forgotten the old
ones. The record only sees prompts' full blocks (not decode output, nor other routers'
traffic), so it is an optimistic estimate; a smaller `blocks_per_replica` decays it faster.

Expected hit of a call on a replica = the number of leading block hashes of the call present
in that replica's record (the chained-prefix run). Since a hash's ancestors are always
touched after it, presence is monotone along a chain and a binary search finds the run.
The call goes to the healthy replica with the longest run; ties (zero hits included) go to
the least loaded (`load_tokens`), then the lowest index. With `max_load_gap` set, replicas
whose `load_tokens` exceed the least loaded's by more than it are not considered (a guard
against one replica taking every call of a shared prefix; off by default).
O(#block_hashes + #replicas * log #block_hashes) per call, amortized; memory bounded by the
sum of the replicas' block counts.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad, healthy


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
        self.blocks_per_replica = blocks_per_replica
        self.max_load_gap = max_load_gap
        self._sent: dict[int, OrderedDict[int, None]] = {}

    def _capacity(self, load: ReplicaLoad) -> int:
        return max(1, self.blocks_per_replica or load.kv_blocks_total)

    def _record(self, load: ReplicaLoad) -> OrderedDict[int, None] | None:
        record = self._sent.get(load.replica)
        if record is not None:
            capacity = self._capacity(load)
            while len(record) > capacity:
                record.popitem(last=False)
        return record

    def expected_hit(self, load: ReplicaLoad, block_hashes: Sequence[int]) -> int:
        """Blocks of the chained prefix `block_hashes` expected cached at `load.replica`."""
        record = self._record(load)
        if not record:
            return 0
        lo, hi = 0, len(block_hashes)
        while lo < hi:
            mid = (lo + hi) // 2
            if block_hashes[mid] in record:
                lo = mid + 1
            else:
                hi = mid
        return lo

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
        self._send(best, call.block_hashes)
        return best.replica

    def _send(self, load: ReplicaLoad, block_hashes: Sequence[int]) -> None:
        record = self._sent.setdefault(load.replica, OrderedDict())
        for h in reversed(block_hashes):
            if h in record:
                record.move_to_end(h)
            else:
                record[h] = None
        self._record(load)

    def replica_lost(self, replica: int) -> None:
        self._sent.pop(replica, None)
