"""Learnt retention and prefetch in the scheduler (scheduler.memory): a retention time
chosen from a program class's return times, KV offloaded to host brought back onto free
blocks before the next call is expected, never at the expense of a live program's KV, and
never once the call has come. Same set-up as test_memory (PLAS, 4-token blocks, one step =
one time unit)."""

from __future__ import annotations

import pytest

from test_memory import add_call, make_sim, offloaded_setup, step_until


def prefetched(sim) -> int:
    return sim.scheduler.stats()["prefetched_blocks"]


def test_offloaded_kv_comes_back_once_free_blocks_appear_and_serves_the_next_call():
    sim, a1 = offloaded_setup(prefetch=True)  # A's 2 blocks on host, B's KV on all the rest
    step_until(sim, 15.0)  # past A's expected return (hint 10 s after t=4)
    assert prefetched(sim) == 0  # B is live: its KV outranks an empty device block
    assert sim.kv.pool.num_evictable(0.0) == 0
    sim.scheduler.end_program("B", sim.now)  # B's KV is nobody's now
    plan = sim.step()
    assert plan.swap_in == [(1, 1), (0, 2)]  # (host, device): A's prefix block 0 first
    assert prefetched(sim) == 2 and sim.kv.host_pool.num_cached == 0
    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    plan = sim.step()
    assert plan.swap_in == [] and a2.num_cached_tokens == 8  # a device hit: no fetch
    assert sim.scheduler.stats()["fetched_blocks"] == 0
    sim.run_clean()


def test_prefetch_waits_for_the_expected_return_less_the_copy_time():
    sim, _ = offloaded_setup(prefetch=True)  # hint 10 s after a1 finished at t=4
    sim.scheduler.end_program("B", sim.now)
    step_until(sim, 13.0)
    assert prefetched(sim) == 0
    while not prefetched(sim):
        sim.step()
    assert sim.plans[-1].created_at == 14.0  # due at 14 - 1e-4 (one way of a 2-block copy)
    sim.run_clean()


def test_a_call_that_comes_first_fetches_its_own_kv_and_nothing_is_prefetched():
    sim, a1 = offloaded_setup(prefetch=True)
    sim.scheduler.end_program("B", sim.now)
    add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    sim.run_clean()
    stats = sim.scheduler.stats()
    assert (stats["fetched_blocks"], stats["prefetched_blocks"]) == (2, 0)
    step_until(sim, 30.0)
    assert prefetched(sim) == 0


def test_without_prefetch_the_kv_waits_on_host_for_the_call():
    sim, a1 = offloaded_setup(prefetch=False)
    sim.scheduler.end_program("B", sim.now)
    step_until(sim, 20.0)
    assert prefetched(sim) == 0 and sim.kv.host_pool.num_cached == 2
    add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    sim.run_clean()
    assert sim.scheduler.stats()["fetched_blocks"] == 2


@pytest.mark.parametrize("rule, ttl", [("learnt", 2.0), ("ttl", 4.0)])
def test_after_sixteen_returns_the_retention_is_the_longest_return_not_twice_the_mean(rule, ttl):
    """A's tool calls all take 2 s. Nothing waits for blocks, so the learnt rule keeps the
    KV while a return is still likely: 2 s; the ttl rule keeps it 2 x the mean gap: 4 s."""
    sim = make_sim(num_blocks=65, retention_rule=rule)
    sim.start("A")
    tokens = list(range(200, 208))
    for i in range(17):
        call = add_call(sim, "A", f"a{i}", tokens, 2)
        sim.run_until(f"a{i}")
        done, tokens = sim.now, call.all_token_ids + [1, 2]
        if i < 16:
            step_until(sim, done + 2.0)
    assert sim.scheduler.memory.return_times.num_samples() == 16
    expired = sim.scheduler.stats()["retentions_expired"]
    step_until(sim, done + ttl)
    assert sim.scheduler.stats()["retentions_expired"] == expired
    sim.step()
    assert sim.scheduler.stats()["retentions_expired"] == expired + 1
    sim.run_clean()
