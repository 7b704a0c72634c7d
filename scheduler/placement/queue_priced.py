"""agentix, the queue-priced placement (the default): a program's first call goes where its
first token is expected soonest, priced in tokens; its later calls follow their history.

For each healthy replica, the work that would pass before the call's first token there:

    cost = (load_weight [+ new_program_weight for a program's first call]) * load_tokens
           + (prompt_tokens - expected hit tokens)
           + [move_weight for a later call] * (
                 queue_weight * waiting_tokens
                 + memory_weight * max(0, load_tokens + that prefill - KV capacity in tokens))

The prefill term is the call's own prefill after its prefix-cache hit there: from the
replica's KV events when it reports them (`ReplicaLoad.cached`), else from the block hashes
the router sent to each replica (`SentBlocks`, as `prefix_aware` keeps them). A program's
history lives where its earlier calls went, so its next call's hit is largest there. The
queue term is the prefill queued ahead of it (`waiting_tokens`: queued calls' tokens still
to compute, counted before their own prefix hits, so an over-estimate), at 1 / `queue_weight`
(50) queued tokens per token of prefill; running calls' KV (`load_tokens`) slows a replica's
steps only a little, so the default prices it at 0. The memory term (`memory_weight`, default
1) prices what a replica cannot hold: the tokens its running and queued calls and this
call's prefill would need beyond its KV cache, which it must evict and recompute; it is 0 on a
replica with room, and moves new programs away from a replica whose contexts overflow it (the
coding workload, whose shared system prompt otherwise keeps every program on the replicas
that hold it: RESULTS_ARCHIVE, "Coding at four replicas", measured before the simulator
kept the router's accounting).

`move_weight` (default 0) scales the queue and memory terms for the calls of a program that
already has a call placed. At 0 a later call goes where its prefill after the hit is least,
which is where its history is (as `prefix_aware`); ties, such as a history evicted everywhere,
go to fewer load tokens. At 1 a later call leaves its history when the queue or the memory
shortage in front of it is worth more than recomputing it elsewhere (the rule before session
13): at the edge of capacity with alike replicas every such move lost, because a move wastes
the history's prefill and adds it to another replica's queue, and the queue term over-states
the queue of LATS trees' queued siblings (bench/notes/2026-12-01-load-balancer.md, "Session
12: why agentix loses on mixed", "Session 13: later calls follow their history").

`new_program_weight` (default `auto`) adds a weight to `load_weight` for a program's first
call, whose replica is where its KV will grow. `auto` makes it what programs grow to: the
mean largest prompt of the last PEAK_WINDOW ended programs over the replica's KV capacity in
tokens (0 before any ended), so a new program pays its expected size times the fraction of
the replica already in use: about 0.24 on coding, where it spreads the programs over the
replicas as `pinned` does, and 0.007 on mixed, where the prefix a replica holds still decides.
A number fixes the weight (at 1 new programs go by load, which costs mixed 17% of its mean).
Programs count as new until a call of theirs is placed, and again after `program_ended`.

Measured (bench/notes/2026-12-01-load-balancer.md, "Session 13: later calls follow their
history", "Session 14: mixed on three seeds"): at steady state on four alike replicas the
defaults (0, 0.02, 1,
auto, 0) hold `prefix_aware`'s capacity on ShareGPT and LATS and `pinned`'s on coding (1.2%
behind its mean); on mixed they gain a rate step over `move_weight` 1 and hold
`prefix_aware`'s capacity on the median of three seeds, one step (11.4/s) behind it on one
seed and 1% behind on the mean. They beat `prefix_aware` when one replica is slow or one
tenant is hot (finite traces).
`load_weight` 0.05 with `queue_weight` 0 and `memory_weight` and `new_program_weight` 0 is the
earlier rule. Ties: fewer load tokens, then the lowest index.
O(#block_hashes + #replicas * log #block_hashes) per call, amortized.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from scheduler.placement.base import Placement, PlacementRequest, ReplicaLoad, healthy
from scheduler.placement.sent_blocks import SentBlocks


AUTO = "auto"
PEAK_WINDOW = 100  # ended programs whose largest prompts the `auto` new-program weight averages


def _weight(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"agentix: {name} must be a number >= 0, got {value!r}")
    return float(value)


class QueuePricedPlacement(Placement):
    name = "agentix"
    options = ("load_weight", "queue_weight", "memory_weight", "new_program_weight",
               "move_weight")

    def __init__(self, load_weight: float = 0.0, queue_weight: float = 0.02,
                 memory_weight: float = 1.0, new_program_weight: float | str = AUTO,
                 move_weight: float = 0.0) -> None:
        self.load_weight = _weight("load_weight", load_weight)
        self.queue_weight = _weight("queue_weight", queue_weight)
        self.memory_weight = _weight("memory_weight", memory_weight)
        self.move_weight = _weight("move_weight", move_weight)
        self.new_program_weight = (AUTO if new_program_weight == AUTO
                                   else _weight("new_program_weight", new_program_weight))
        self.sent = SentBlocks()
        self.peaks: dict[str, int] = {}  # live program with a call placed -> largest prompt
        self.ended_peaks: deque[int] = deque(maxlen=PEAK_WINDOW)

    def cost(self, call: PlacementRequest, load: ReplicaLoad) -> float:
        """The call's expected work before its first token at `load.replica`, in tokens."""
        hit = self.sent.expected_hit(load, call.block_hashes) * call.block_size
        prefill = max(0, call.prompt_tokens - hit)
        capacity = load.kv_blocks_total * call.block_size
        overflow = max(0, load.load_tokens + prefill - capacity)
        new = call.program_id not in self.peaks
        load_weight = self.load_weight + (self._new_program_weight(capacity) if new else 0.0)
        busy_weight = 1.0 if new else self.move_weight
        return (load_weight * load.load_tokens + prefill
                + busy_weight * (self.queue_weight * load.waiting_tokens
                                 + self.memory_weight * overflow))

    def _new_program_weight(self, capacity: int) -> float:
        """The weight, or with `auto` the mean largest prompt of the last PEAK_WINDOW ended
        programs over the replica's KV capacity in tokens (0 before any ended)."""
        if self.new_program_weight != AUTO:
            return self.new_program_weight
        if not self.ended_peaks:
            return 0.0
        return sum(self.ended_peaks) / len(self.ended_peaks) / capacity

    def place(self, call: PlacementRequest, loads: Sequence[ReplicaLoad]) -> int:
        best = min(healthy(loads),
                   key=lambda load: (self.cost(call, load), load.load_tokens, load.replica))
        self.sent.send(best, call.block_hashes)
        self.peaks[call.program_id] = max(self.peaks.get(call.program_id, 0),
                                          call.prompt_tokens)
        return best.replica

    def replica_lost(self, replica: int) -> None:
        self.sent.forget(replica)

    def program_ended(self, program_id: str) -> None:
        peak = self.peaks.pop(program_id, None)
        if peak is not None:
            self.ended_peaks.append(peak)
