"""What a preemption does with its victim's KV: `keep` (into the prefix cache at its
program's rank), `swap` or `recompute`; how `auto` prices them; the counts per kind; and the
measured rates (`TransferRates`) that price them on a real engine.

Rates are powers of two so that every price below is exact.
"""

from __future__ import annotations

import pytest

from harness import Sim
from scheduler.call_state import CallStatus
from scheduler.config import SchedulerConfig
from scheduler.preemption import (PreemptionCosts, PreemptionKind, TransferRates,
                                  choose_preemption, preemption_costs)

LEVELS = dict(num_queues=4, quantum_base=8, quantum_growth=2.0, starvation_beta=None)
RATES = dict(bytes_per_block=1024, host_link_bandwidth=2.0 ** 20, swap_latency=2.0 ** -12,
             prefill_tokens_per_second=1024.0)
SLOW_LINK = {**RATES, "host_link_bandwidth": 2.0 ** 10}
LOW_RETAINED_RANK = 2.0  # bottom of 4 levels, retained: 1 + 2 * 0 + 1


def make_sim(limit: str, mode: str, **config) -> Sim:
    """PLAS with prefix caching; `limit` is what the high call is short of: "seats" (one
    seat, room for both) or "memory" (8 usable blocks, seats for both)."""
    room = dict(num_blocks=100, max_num_seqs=1) if limit == "seats" else \
        dict(num_blocks=9, max_num_seqs=8)
    config.setdefault("num_host_blocks", 50)
    return Sim("plas", block_size=4, prefix_caching=True, preemption_mode=mode,
               **room, **LEVELS, **config)


def low_then_high(sim: Sim) -> None:
    """`low` (program service 100: bottom level) runs two steps: 18 tokens, 17 computed, on
    blocks [1..5] (1-4 cached); then `high` (a fresh program) arrives."""
    sim.start("low")
    sim.scheduler.table.get("low").service = 100.0
    sim.call("low", "low", prompt_len=16, output_len=10)
    sim.step()
    sim.step()
    assert sim.kv.block_table("low") == [1, 2, 3, 4, 5]
    assert sim.calls["low"].num_computed_tokens == 17
    sim.start("high")
    sim.call("high", "high", prompt_len=16, output_len=4)


def kinds(sim: Sim) -> dict[str, int]:
    stats = sim.scheduler.stats()
    return {k: stats[k] for k in ("num_preemptions", "preemptions_keep", "preemptions_swap",
                                  "preemptions_recompute", "num_swap_ins")}


def test_keep_frees_the_victim_at_its_rank_and_it_resumes_by_a_prefix_hit():
    sim = make_sim("seats", "keep")
    low_then_high(sim)
    plan = sim.step()
    assert plan.preempted == {"low": PreemptionKind.KEEP}
    assert plan.swap_out == [] and [c.call.call_id for c in plan.chunks] == ["high"]
    low = sim.calls["low"]
    assert (low.status, low.num_computed_tokens) == (CallStatus.WAITING, 0)
    assert [sim.kv.pool.free_rank(b) for b in (1, 2, 3, 4, 5)] == [LOW_RETAINED_RANK] * 4 + [None]
    sim.run_until("high")
    plan = sim.step()
    assert [(c.call.call_id, c.start, c.num_tokens) for c in plan.chunks] == [("low", 16, 2)]
    assert low.num_cached_tokens == 16
    assert sim.kv.block_table("low")[:4] == [1, 2, 3, 4]
    sim.run_clean()
    assert kinds(sim) == dict(num_preemptions=1, preemptions_keep=1, preemptions_swap=0,
                              preemptions_recompute=0, num_swap_ins=0)


def test_kept_blocks_evicted_under_memory_pressure_are_offloaded_and_fetched_back():
    sim = make_sim("memory", "keep")
    low_then_high(sim)
    plan = sim.step()
    assert plan.preempted == {"low": PreemptionKind.KEEP}
    assert sim.kv.block_table("high") == [6, 7, 8, 5]  # the plain blocks first
    plan = sim.step()  # high's fifth block evicts low's tail (rank 2) to the host
    assert plan.swap_out == [(4, 0)]
    sim.run_until("high")
    plan = sim.step()
    assert plan.swap_in[:1] == [(0, plan.chunks[0].block_table[3])]
    assert [(c.call.call_id, c.start) for c in plan.chunks] == [("low", 16)]
    assert sim.calls["low"].num_cached_tokens == 16  # 12 on the device, 4 fetched
    sim.run_clean()
    assert sim.scheduler.stats()["fetched_blocks"] == 1
    assert kinds(sim)["preemptions_keep"] == 1


@pytest.mark.parametrize("limit, rates, kind", [
    ("seats", RATES, PreemptionKind.KEEP),  # revived by a prefix hit: 1 token lost
    ("memory", RATES, PreemptionKind.SWAP),  # kept blocks would be evicted at once
    ("memory", SLOW_LINK, PreemptionKind.RECOMPUTE),
])
def test_auto_keeps_for_seats_and_swaps_or_recomputes_for_memory(limit, rates, kind):
    sim = make_sim(limit, "auto", **rates)
    low_then_high(sim)
    costs = preemption_costs(sim.scheduler.rates, num_blocks=5, num_computed_tokens=17,
                             block_size=4, can_keep=True, can_swap=True,
                             for_memory=limit == "memory")
    assert choose_preemption("auto", costs) is kind
    plan = sim.step()
    assert plan.preempted == {"low": kind}
    assert sim.calls["low"].status is (CallStatus.SWAPPED if kind is PreemptionKind.SWAP
                                       else CallStatus.WAITING)
    assert plan.swap_out[:5] == ([(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]
                                 if kind is PreemptionKind.SWAP else [])
    sim.run_clean()
    expected = dict(num_preemptions=1, preemptions_keep=0, preemptions_swap=0,
                    preemptions_recompute=0, num_swap_ins=int(kind is PreemptionKind.SWAP))
    expected[f"preemptions_{kind.value}"] = 1
    assert kinds(sim) == expected


def test_auto_without_prefix_caching_never_keeps():
    sim = Sim("plas", block_size=4, num_blocks=100, max_num_seqs=1, num_host_blocks=50,
              preemption_mode="auto", **LEVELS, **RATES)
    low_then_high(sim)
    assert sim.step().preempted == {"low": PreemptionKind.SWAP}
    sim.run_clean()


def test_preemption_costs_are_exact():
    rates = TransferRates(SchedulerConfig(service_mode="tokens", **RATES))
    seat = preemption_costs(rates, 5, 17, 4, can_keep=True, can_swap=True, for_memory=False)
    assert seat == PreemptionCosts(keep=1 / 1024, swap=10.5 / 1024, recompute=17 / 1024)
    memory = preemption_costs(rates, 5, 17, 4, can_keep=True, can_swap=True, for_memory=True)
    assert memory == PreemptionCosts(keep=11.5 / 1024, swap=10.5 / 1024, recompute=17 / 1024)
    inf = float("inf")
    assert preemption_costs(rates, 5, 17, 4, False, False, True) == \
        PreemptionCosts(keep=inf, swap=inf, recompute=17 / 1024)
    assert [seat.cheapest(), memory.cheapest()] == [PreemptionKind.KEEP, PreemptionKind.SWAP]


@pytest.mark.parametrize("mode, costs, kind", [
    ("keep", PreemptionCosts(5.0, 1.0, 1.0), PreemptionKind.KEEP),  # fixed modes ignore prices
    ("swap", PreemptionCosts(1.0, 5.0, 1.0), PreemptionKind.SWAP),
    ("recompute", PreemptionCosts(1.0, 1.0, 5.0), PreemptionKind.RECOMPUTE),
    ("keep", PreemptionCosts(float("inf"), 1.0, 1.0), PreemptionKind.RECOMPUTE),  # impossible
    ("swap", PreemptionCosts(1.0, float("inf"), 1.0), PreemptionKind.RECOMPUTE),
    ("auto", PreemptionCosts(3.0, 2.0, 1.0), PreemptionKind.RECOMPUTE),
    ("auto", PreemptionCosts(1.0, 1.0, 1.0), PreemptionKind.KEEP),  # ties: keep, swap, recompute
])
def test_choose_preemption(mode, costs, kind):
    assert choose_preemption(mode, costs) is kind


def time_rates(**config) -> TransferRates:
    return TransferRates(SchedulerConfig(service_mode="time", **{**RATES, **config}))


def test_observe_step_keeps_a_running_average_of_mostly_prefill_steps():
    rates = time_rates()
    rates.observe_step(prefill_tokens=256, batched_tokens=256, seconds=0.5)
    assert (rates.prefill_tokens_per_second, rates.num_prefill_samples) == (512.0, 1)
    rates.observe_step(prefill_tokens=128, batched_tokens=256, seconds=0.25)  # half prefill
    assert (rates.prefill_tokens_per_second, rates.num_prefill_samples) == (640.0, 2)
    rates.observe_step(prefill_tokens=127, batched_tokens=127, seconds=0.001)  # too few
    rates.observe_step(prefill_tokens=128, batched_tokens=257, seconds=0.001)  # mostly decode
    rates.observe_step(prefill_tokens=256, batched_tokens=256, seconds=0.0)
    assert (rates.prefill_tokens_per_second, rates.num_prefill_samples) == (640.0, 2)


def test_observe_swap_keeps_a_running_average_of_the_link():
    rates = time_rates()
    rates.observe_swap(num_blocks=4, num_transfers=2, seconds=1.0 + 2 * 2.0 ** -12)
    assert (rates.host_link_bandwidth, rates.num_link_samples) == (4096.0, 1)
    rates.observe_swap(num_blocks=8, num_transfers=1, seconds=0.5 + 2.0 ** -12)
    assert (rates.host_link_bandwidth, rates.num_link_samples) == (4096.0 + 0.25 * 12288, 2)
    rates.observe_swap(num_blocks=0, num_transfers=0, seconds=1.0)
    rates.observe_swap(num_blocks=4, num_transfers=2, seconds=2 * 2.0 ** -12)  # all latency
    assert (rates.host_link_bandwidth, rates.num_link_samples) == (7168.0, 2)
    assert rates.swap_seconds(7) == 2 * (7 * 1024 / 7168.0 + 2.0 ** -12)


@pytest.mark.parametrize("config, prefill_rate", [
    (dict(service_mode="tokens"), 1024.0),  # token mode: steps take no time, nothing measured
    (dict(measure_rates=False), 1024.0),
    (dict(bytes_per_block=0), 512.0),  # the link cannot be measured without block bytes
])
def test_rates_are_not_measured_in_token_mode_or_when_off(config, prefill_rate):
    rates = TransferRates(SchedulerConfig(**{**RATES, "service_mode": "time", **config}))
    rates.observe_step(256, 256, 0.5)
    rates.observe_swap(4, 1, 1.0)
    assert rates.prefill_tokens_per_second == prefill_rate
    assert (rates.host_link_bandwidth, rates.num_link_samples) == (2.0 ** 20, 0)


def step_timed(sim: Sim, seconds: float, swap_seconds: float = 0.0):
    """One step that took `seconds` of clock, `swap_seconds` of them copying."""
    plan = sim.scheduler.schedule(sim.now)
    sim.now += seconds
    sim.scheduler.update(plan, [7 if c.samples else None for c in plan.chunks], sim.now,
                         swap_seconds)
    return plan


@pytest.mark.parametrize("service_mode, measured", [("time", True), ("tokens", False)])
def test_the_scheduler_measures_prefill_and_swap_steps_in_time_mode(service_mode, measured):
    sim = Sim("plas", block_size=4, num_blocks=70, num_host_blocks=70, max_num_seqs=1,
              preemption_mode="swap", service_mode=service_mode, **{**LEVELS, **RATES,
                                                                     "quantum_base": 8.0})
    sim.start("low")
    sim.scheduler.table.get("low").service = 100.0
    sim.call("low", "low", prompt_len=256, output_len=4)
    step_timed(sim, seconds=0.5 + 0.25, swap_seconds=0.25)  # 256 prefill tokens in 0.5 s
    sim.start("high")
    sim.call("high", "high", prompt_len=4, output_len=1)
    plan = step_timed(sim, seconds=1.0, swap_seconds=0.5 + 2.0 ** -12)
    assert plan.preempted == {"low": PreemptionKind.SWAP} and len(plan.swap_out) == 64
    stats = sim.scheduler.stats()
    if measured:
        assert stats["prefill_tokens_per_second"] == 512.0
        assert stats["host_link_bandwidth"] == 64 * 1024 / 0.5
    else:
        assert stats["prefill_tokens_per_second"] == 1024.0
        assert stats["host_link_bandwidth"] == 2.0 ** 20
    sim.run()
    sim.scheduler.check_integrity()
