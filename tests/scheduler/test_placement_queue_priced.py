"""The queue-priced placement (`agentix`): exact decisions on scripted loads and cache
states. A call goes where load x load_weight + queued tokens x queue_weight + its prefill
after the expected hit (blocks sent there x block size) is least (mostly load_weight 1 and
queue_weight 0 here, so the arithmetic is plain; the memory term, on by default, is 0 while a
replica's load fits its KV cache)."""

from __future__ import annotations

import pytest

from kvcache.prefix_hash import hash_block
from scheduler.placement import PlacementRequest, QueuePricedPlacement, ReplicaLoad, make_placement


def loads(*tokens: int | None, kv_blocks: int = 100) -> list[ReplicaLoad]:
    """Replicas with these queued tokens (None: unhealthy), `kv_blocks` blocks of KV each."""
    return [ReplicaLoad(replica=i, healthy=t is not None, waiting_tokens=t or 0,
                        kv_blocks_total=kv_blocks) for i, t in enumerate(tokens)]


def history(n: int, start: int = 0) -> tuple[int, ...]:
    """Chained hashes of n one-token blocks."""
    out, parent = [], None
    for token in range(start, start + n):
        parent = hash_block(parent, [token])
        out.append(parent)
    return tuple(out)


def call(program: str, blocks: int, prompt: int | None = None) -> PlacementRequest:
    """A prompt of `blocks` blocks of 16 tokens (plus `prompt - 16 * blocks` more)."""
    return PlacementRequest(program, prompt or 16 * blocks, history(blocks), 16)


def test_a_first_call_goes_to_the_least_loaded():
    cost = QueuePricedPlacement(load_weight=1.0, queue_weight=0)
    assert cost.place(call("p", 4), loads(300, 200, 250)) == 1


def test_a_program_stays_where_its_history_is_while_that_is_cheaper():
    cost = QueuePricedPlacement(load_weight=1.0, queue_weight=0)
    assert cost.place(call("p", 10), loads(0, 0)) == 0         # 160 tokens sent to 0
    # Next call: 12 blocks, 10 of them cached on 0. On 0: 500 load + 32 prefill = 532;
    # on 1: 400 load + 192 prefill = 592.
    assert cost.cost(call("p", 12), loads(500, 400)[0]) == 532
    assert cost.cost(call("p", 12), loads(500, 400)[1]) == 592
    assert cost.place(call("p", 12), loads(500, 400)) == 0
    # With 600 more load on 0 than on 1 the history is not worth waiting for: it moves.
    assert cost.place(call("p", 14), loads(900, 300)) == 1


def test_load_weight_trades_locality_for_load():
    # all weights 0 is prefix_aware: the hit wins whatever the load
    local = QueuePricedPlacement(load_weight=0.0, queue_weight=0, memory_weight=0)
    balanced = QueuePricedPlacement(load_weight=10.0, queue_weight=0)
    for placement in (local, balanced):
        assert placement.place(call("p", 10), loads(0, 0)) == 0
    assert local.place(call("p", 12), loads(5000, 0)) == 0
    assert balanced.place(call("p", 12), loads(50, 0)) == 1    # 500 + 32 > 0 + 192


def test_ties_go_to_fewer_load_tokens_then_the_lowest_index():
    cost = QueuePricedPlacement(load_weight=1.0, queue_weight=0)
    assert cost.place(call("p", 0, prompt=50), loads(100, 100, None)) == 0
    # Replica 1 has 16 tokens cached and 16 more load: equal cost, fewer load tokens wins.
    cost.place(call("q", 1), loads(100, 0))
    assert cost.place(call("q", 2), loads(0, 16)) == 0


def test_a_lost_replica_forgets_what_was_sent_there():
    cost = QueuePricedPlacement(load_weight=1.0, queue_weight=0)
    cost.place(call("p", 10), loads(0, 0))
    cost.replica_lost(0)
    assert cost.cost(call("p", 10), loads(0, 0)[0]) == 160


def test_by_default_a_first_call_prices_queued_tokens_at_one_fiftieth_and_later_calls_stay():
    cost = make_placement("agentix")
    assert (cost.load_weight, cost.queue_weight, cost.memory_weight,
            cost.new_program_weight, cost.move_weight) == (0.0, 0.02, 1.0, "auto", 0.0)
    assert cost.place(call("p", 10), loads(0, 0)) == 0         # 160 tokens sent to 0
    # Running KV is not priced while it fits: 10,000 running tokens on 0 do not move the
    # call (1,000 blocks of 16 hold them).
    busy = [ReplicaLoad(0, running_tokens=10_000, kv_blocks_total=1000),
            ReplicaLoad(1, kv_blocks_total=1000)]
    assert cost.cost(call("p", 12), busy[0]) == 32
    assert cost.place(call("p", 12), busy) == 0               # 12 blocks now sent to 0
    # A later call of p does not price the queue: 10,000 queued tokens on 0 leave it there.
    assert cost.cost(call("p", 14), loads(10_000, 0)[0]) == 32
    assert cost.place(call("p", 14), loads(10_000, 0, kv_blocks=1000)) == 0
    # A first call does, at 0.02 a token. Program q's 16 blocks, 14 cached on 0: 1,000
    # queued there cost 20 + 32 = 52 against 256 on 1; 20,000 cost 400 + 32 = 432 (it goes).
    assert cost.cost(call("q", 16), loads(1000, 0)[0]) == pytest.approx(52)
    assert cost.cost(call("q", 16), loads(1000, 0)[1]) == 256
    assert cost.place(call("q", 16), loads(20_000, 0, kv_blocks=2000)) == 1


@pytest.mark.parametrize("name", ["load_weight", "queue_weight", "memory_weight",
                                  "new_program_weight", "move_weight"])
@pytest.mark.parametrize("bad", [-1, True, "x", float("nan")])
def test_a_bad_weight_is_refused(name, bad):
    with pytest.raises(ValueError, match=f"agentix: {name} must be a number >= 0"):
        make_placement("agentix", **{name: bad})


def test_memory_weight_prices_only_what_a_replica_cannot_hold():
    """kv_blocks_total 100 (1,600 tokens of 16): replica 0 holds the program's history (10
    blocks) but its calls already need 1,500 tokens; 1 is empty. Without the memory term
    the history wins; with it (and move_weight 1, so a later call pays it), 0 pays for the
    1,500 + 32 - 1,600 < 0 overflow only once the load passes capacity."""
    plain = QueuePricedPlacement(queue_weight=0, memory_weight=0, move_weight=1)
    sized = QueuePricedPlacement(queue_weight=0, move_weight=1)  # memory_weight 1, the default
    for placement in (plain, sized):
        assert placement.place(call("p", 10), loads(0, 0)) == 0
    assert sized.cost(call("p", 12), loads(1500, 0)[0]) == 32  # fits: no term
    assert sized.cost(call("p", 12), loads(1800, 0)[0]) == 32 + (1800 + 32 - 1600)
    assert plain.place(call("p", 12), loads(1800, 0)) == 0
    assert sized.place(call("p", 12), loads(1800, 0)) == 1     # 264 > 192 on the empty one
    with pytest.raises(ValueError, match="memory_weight"):
        QueuePricedPlacement(memory_weight=-1)


def test_new_program_weight_prices_running_kv_for_a_programs_first_call_only():
    """Replica 0 holds a shared 10-block prefix (160 tokens) and 1,000 running tokens; 1 is
    empty. With new_program_weight 1, a new program's first call pays 1,000 on 0 against
    160 of prefill on 1, so it goes to 1; its next call (6 more blocks, 10 of them cached
    on 1 now) is priced without the term, as is every later call until the program ends."""
    busy = [ReplicaLoad(0, running_tokens=1000, kv_blocks_total=1000),
            ReplicaLoad(1, kv_blocks_total=1000)]
    plain = QueuePricedPlacement(queue_weight=0)
    spread = QueuePricedPlacement(queue_weight=0, new_program_weight=1.0)
    for placement in (plain, spread):
        assert placement.place(call("seed", 10), loads(0, 0, kv_blocks=1000)) == 0
    assert plain.place(call("p", 10), busy) == 0            # 0 + 0 against 160
    assert spread.cost(call("p", 10), busy[0]) == 1000
    assert spread.place(call("p", 10), busy) == 1           # 1,000 against 160
    assert spread.cost(call("p", 16), busy[1]) == 96       # a later call: no load term
    spread.program_ended("p")
    assert spread.cost(call("p", 16), busy[1]) == 96 + 0   # new again, 1 has no load
    assert spread.cost(call("p", 16), busy[0]) == 1000 + 96


def test_the_auto_new_program_weight_is_the_mean_ended_peak_over_the_kv_capacity():
    """`auto`: 0 until a program ends; then the mean of ended programs' largest prompts (800
    tokens for "a") over the replica's KV capacity (1,000 blocks of 16: 16,000 tokens), 0.05:
    a new program's first call pays 200 for the 4,000 running tokens on 0, against 160 of
    prefill on the empty 1."""
    busy = [ReplicaLoad(0, running_tokens=4000, kv_blocks_total=1000),
            ReplicaLoad(1, kv_blocks_total=1000)]
    auto = QueuePricedPlacement(queue_weight=0, new_program_weight="auto")
    assert auto.place(call("a", 50), loads(0, 0, kv_blocks=1000)) == 0
    assert (auto.cost(call("b", 10), busy[0]), auto.cost(call("b", 10), busy[1])) == (0, 160)
    auto.program_ended("a")
    assert auto.cost(call("b", 10), busy[0]) == pytest.approx(200)
    assert auto.place(call("b", 10), busy) == 1
    assert auto.cost(call("b", 10), busy[0]) == 0  # no longer new


def test_move_weight_scales_the_queue_and_memory_terms_for_a_placed_programs_calls():
    """Replica 0 holds program p's 10 blocks and has 10,000 queued tokens (of 1,600 it can
    hold); 1 is empty. A later call of p (12 blocks) costs on 0: 32 of prefill + move_weight
    x (0.02 x 10,000 queued + 10,000 + 32 - 1,600 overflow), against 192 of prefill on 1. A
    first call (program q, whose 10 blocks are p's, all cached on 0) pays the terms in full
    whatever move_weight is."""
    placements = {weight: QueuePricedPlacement(move_weight=weight) for weight in (1.0, 0.5, 0)}
    for placement in placements.values():
        assert placement.place(call("p", 10), loads(0, 0)) == 0
    busy = loads(10_000, 0)
    terms = 0.02 * 10_000 + (10_000 + 32 - 1600)
    for weight, placement in placements.items():
        assert placement.cost(call("p", 12), busy[0]) == pytest.approx(32 + weight * terms)
        assert placement.cost(call("p", 12), busy[1]) == 192
        assert placement.cost(call("q", 10), busy[0]) == pytest.approx(
            0.02 * 10_000 + (10_000 - 1600))
    assert placements[1.0].place(call("p", 12), busy) == 1
    assert placements[0].place(call("p", 12), busy) == 0      # follows its history
    assert placements[0].place(call("q", 10), busy) == 1      # a new program does not
