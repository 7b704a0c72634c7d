"""cost: the replica where the call's first token is expected soonest, priced in tokens.

For each healthy replica, the work that would pass before the call's first token there:

    cost = load_weight * load_tokens + (prompt_tokens - expected hit tokens)

`load_tokens` is what the replica reports (its running calls' tokens plus the tokens its
queue still has to compute): the work its batch and queue put ahead of a new call. The
second term is the call's own prefill after its prefix-cache hit there, from the block hashes
the router sent to each replica (`SentBlocks`, as `prefix_aware` keeps them). A program's
history lives where its earlier calls went, so its next call's hit is largest there: the
locality the pin of `cutoff` (the paper's rule) only guesses, here weighed against load, and
a call moves away (the program follows it) when the load it would wait behind costs more than
recomputing its history elsewhere. `load_weight` tilts it: 0 is prefix_aware, large is
least_loaded; the default, 0.05, is the best measured trade (bench/RESULTS.md, "The cost
placement": on ShareGPT it costs 3% of prefix_aware's mean for 1.1-1.4x better P99; on
mixed it loses 1.24x on the mean). Ties: fewer load tokens, then the lowest index.
O(#block_hashes + #replicas * log #block_hashes) per call, amortized.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad, healthy
from scheduler.placement.sent_blocks import SentBlocks

class CostPlacement(Placement):
    name = "cost"
    options = ("load_weight",)

    def __init__(self, load_weight: float = 0.05) -> None:
        if isinstance(load_weight, bool) or not isinstance(load_weight, (int, float)) \
                or not load_weight >= 0:
            raise ValueError(f"cost: load_weight must be a number >= 0, got {load_weight!r}")
        self.load_weight = float(load_weight)
        self.sent = SentBlocks()

    def cost(self, call: PlacementRequest, load: ReplicaLoad) -> float:
        """The call's expected work before its first token at `load.replica`, in tokens."""
        hit = self.sent.expected_hit(load, call.block_hashes) * call.block_size
        return self.load_weight * load.load_tokens + max(0, call.prompt_tokens - hit)

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        best = min(healthy(loads),
                   key=lambda load: (self.cost(call, load), load.load_tokens, load.replica))
        self.sent.send(best, call.block_hashes)
        return best.replica

    def replica_lost(self, replica: int) -> None:
        self.sent.forget(replica)
