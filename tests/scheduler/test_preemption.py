"""Priority preemption (memory and seats), swap-or-recompute choice, multistep rounds."""

from __future__ import annotations

import pytest

from harness import Sim
from scheduler.call_state import CallStatus

LEVELS = dict(num_queues=4, quantum_base=8, quantum_growth=2.0, starvation_beta=None)


def low_and_high(sim: Sim) -> None:
    """`low` (program service 100: bottom queue) runs; then `high` (fresh) arrives."""
    sim.start("low")
    sim.scheduler.table.get("low").service = 100.0
    sim.call("low", "low", prompt_len=16, output_len=10)
    sim.step()
    sim.step()
    sim.start("high")
    sim.call("high", "high", prompt_len=16, output_len=4)


@pytest.mark.parametrize("limit", ["memory", "seats"])
def test_a_higher_queue_call_preempts_a_lower_one(limit):
    config = dict(num_blocks=9, max_num_seqs=8) if limit == "memory" else \
        dict(num_blocks=100, max_num_seqs=1)
    sim = Sim("plas", block_size=4, **config, **LEVELS)
    low_and_high(sim)
    plan = sim.step()
    assert list(plan.preempted) == ["low"]
    assert [c.call.call_id for c in plan.chunks] == ["high"]
    assert sim.calls["low"].status is CallStatus.WAITING
    sim.run()
    assert sim.completed == ["high", "low"]
    assert sim.kv.num_free_blocks == sim.kv.pool.num_usable


def test_fcfs_never_preempts_for_priority():
    sim = Sim("fcfs", block_size=4, num_blocks=100, max_num_seqs=1, **LEVELS)
    low_and_high(sim)
    assert not sim.step().preempted
    sim.run()
    assert sim.completed == ["low", "high"]


def test_preemptions_per_round_are_bounded():
    sim = Sim("plas", block_size=4, num_blocks=100, max_num_seqs=3,
              max_preemptions_per_round=2, **LEVELS)
    for i in range(3):
        sim.start(f"low{i}")
        sim.scheduler.table.get(f"low{i}").service = 100.0
        sim.call(f"low{i}", f"low{i}", prompt_len=4, output_len=30)
    sim.step()
    for i in range(3):
        sim.start(f"high{i}")
        sim.call(f"high{i}", f"high{i}", prompt_len=4, output_len=30)
    assert len(sim.step().preempted) == 2
    assert len(sim.step().preempted) == 1


@pytest.mark.parametrize("bandwidth, expect_swap", [(1e12, True), (1e3, False)])
def test_auto_mode_compares_swap_and_recompute_estimates(bandwidth, expect_swap):
    sim = Sim("plas", block_size=4, num_blocks=100, num_host_blocks=50, max_num_seqs=1,
              preemption_mode="auto", bytes_per_block=4096, host_link_bandwidth=bandwidth,
              prefill_tokens_per_second=1000.0, **LEVELS)
    low_and_high(sim)
    blocks = len(sim.kv.block_table("low"))
    swap, recompute = sim.scheduler.rates.swap_seconds(blocks), sim.scheduler.rates.recompute_seconds(17)
    assert (swap < recompute) is expect_swap
    plan = sim.step()
    assert list(plan.preempted) == ["low"]
    assert bool(plan.swap_out) is expect_swap
    assert sim.calls["low"].status is (CallStatus.SWAPPED if expect_swap else CallStatus.WAITING)
    sim.run()
    assert sim.kv.num_free_host_blocks == 50


def test_swap_mode_falls_back_to_recompute_when_the_host_pool_is_full():
    sim = Sim("plas", block_size=4, num_blocks=100, num_host_blocks=1, max_num_seqs=1,
              preemption_mode="swap", **LEVELS)
    low_and_high(sim)
    plan = sim.step()
    assert list(plan.preempted) == ["low"] and plan.swap_out == []
    assert sim.calls["low"].status is CallStatus.WAITING


def test_swapped_call_comes_back_with_its_blocks_and_progress():
    sim = Sim("plas", block_size=4, num_blocks=100, num_host_blocks=50, max_num_seqs=1,
              preemption_mode="swap", **LEVELS)
    low_and_high(sim)
    computed = sim.calls["low"].num_computed_tokens
    plan = sim.step()
    host_blocks = [h for _, h in plan.swap_out]
    assert len(host_blocks) == len(plan.swap_out) > 0
    sim.run_until("high")
    plan = sim.step()
    assert sorted(h for h, _ in plan.swap_in) == sorted(host_blocks)
    assert plan.chunks[0].call.call_id == "low" and plan.chunks[0].start == computed
    sim.run()
    sim.scheduler.check_integrity()


def test_multistep_schedules_once_per_four_decode_steps():
    sim = Sim("fcfs", block_size=4, num_blocks=200, multistep=4, max_num_seqs=8)
    sim.start("p")
    for i in range(4):
        sim.call("p", f"c{i}", prompt_len=6, output_len=33)
    sim.run()
    steps = len(sim.plans)
    assert steps == 33
    assert sim.scheduler.num_rounds == 9  # 1 prefill round + 8 rounds of 4 decode steps


def test_multistep_releases_a_finished_call_mid_round():
    sim = Sim("fcfs", block_size=4, num_blocks=200, multistep=4, max_num_seqs=8)
    sim.start("p")
    sim.call("p", "short", prompt_len=4, output_len=3)
    sim.call("p", "long", prompt_len=4, output_len=12)
    sim.step()  # prefill both
    sim.step()  # round of 4 decodes starts
    sim.step()  # short has its 3 tokens: finished
    assert "short" in sim.completed
    assert sim.kv.block_table("short") == []
    plan = sim.step()
    assert plan.is_continuation and [c.call.call_id for c in plan.chunks] == ["long"]


def round_cut_by_an_arrival(yields: bool) -> Sim:
    """`long` runs a round of 4 decode steps; `new` arrives after its first step."""
    sim = Sim("fcfs", block_size=4, num_blocks=200, multistep=4, max_num_seqs=8,
              multistep_yields=yields)
    sim.start("p")
    sim.call("p", "long", prompt_len=4, output_len=12)
    sim.step()  # prefill
    sim.step()  # the round's first decode step
    assert sim.kv.block_table("long") == [1, 2]  # 5 tokens + 3 reserved for the round
    sim.call("p", "new", prompt_len=4, output_len=2)
    return sim


def test_an_arrival_ends_a_multistep_round_and_is_admitted_at_the_next_step():
    sim = round_cut_by_an_arrival(yields=True)
    plan = sim.step()
    assert not plan.is_continuation
    assert [(c.call.call_id, c.num_tokens) for c in plan.chunks] == [("long", 1), ("new", 4)]
    assert sim.scheduler.num_rounds == 3
    assert sim.kv.block_table("long") == [1, 2]  # the round's reservation is kept, not redone
    sim.run_clean()


def test_without_yielding_an_arrival_waits_for_the_rounds_end():
    sim = round_cut_by_an_arrival(yields=False)
    assert [sim.step().is_continuation for _ in range(3)] == [True, True, True]
    plan = sim.step()
    assert not plan.is_continuation
    assert [(c.call.call_id, c.num_tokens) for c in plan.chunks] == [("long", 1), ("new", 4)]
    sim.run_clean()


def test_admissions_leave_a_token_for_every_running_call_of_lower_queues():
    sim = Sim("plas", block_size=4, num_blocks=100, max_num_seqs=8, max_num_batched_tokens=16,
              **LEVELS)
    sim.start("low")
    sim.scheduler.table.get("low").service = 100.0  # bottom queue
    sim.call("low", "low", prompt_len=8, output_len=20)
    sim.step()
    sim.start("high")
    sim.call("high", "high", prompt_len=20, output_len=4)  # top queue, more than the budget
    plan = sim.step()
    assert {c.call.call_id: c.num_tokens for c in plan.chunks} == {"high": 15, "low": 1}
    assert list(plan.preempted) == []
