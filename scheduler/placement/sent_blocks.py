"""What a router knows of each replica's prefix cache: what the replica's KV events say it
holds (`ReplicaLoad.cached`) when it reports them, else the block hashes it sent there.

With KV events, the expected hit is the run of a call's leading hashes the replica holds
(a cache hit stops at its first miss). Without them, the record below guesses.

Per replica, the chained full-block hashes of the prompts sent to it (`send`), in recency
order and capped at the replica's KV block count (`blocks_per_replica`, default the
`kv_blocks_total` of its load at each use). Sending a prompt touches its hashes last block
first, so a prompt's first blocks are the most recent and the record evicts its oldest
entries, a prompt's tail before its head, as an LRU cache of that size turns over. It only
sees prompts' full blocks (not decode output, nor other routers' traffic), so it is an
optimistic estimate. `expected_hit` is the run of a call's leading hashes present (a hash's
ancestors are always touched after it, so presence is monotone along a chain and a binary
search finds the run). Memory: at most the sum of the replicas' block counts.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from kvcache.cache_events import wire_hash
from scheduler.placement.base import ReplicaLoad


class SentBlocks:
    def __init__(self, blocks_per_replica: int | None = None) -> None:
        self.blocks_per_replica = blocks_per_replica
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
        if load.cached is not None:
            return next((i for i, h in enumerate(block_hashes)
                         if wire_hash(h) not in load.cached), len(block_hashes))
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

    def send(self, load: ReplicaLoad, block_hashes: Sequence[int]) -> None:
        """Record that a prompt of `block_hashes` went to `load.replica`."""
        record = self._sent.setdefault(load.replica, OrderedDict())
        for h in reversed(block_hashes):
            if h in record:
                record.move_to_end(h)
            else:
                record[h] = None
        self._record(load)

    def forget(self, replica: int) -> None:
        self._sent.pop(replica, None)
