"""Program-aware KV memory in the scheduler (`kv_memory="program"`): ranks of cached blocks,
tool-call retention with its TTL and budget, admission that waits rather than evict a
higher-priority program's retained KV, the host tier, ending and expiry, and the service
half-life. PLAS, 4 levels of quanta 8, 16, 32 tokens, token-mode service, one step = 1.0.

Ranks (`Policy.retention_rank`, 4 levels): a live program whose next call enters level L has
rank 1 + 3 * (3 - L), plus 1 while a call of it is queued, plus 2 while it is in a retained
tool call; KV of no live program has rank 0.
"""

from __future__ import annotations

import pytest

from bench.sim.sim_call import SimCall
from harness import Sim
from scheduler.call_state import CallStatus

LEVELS = dict(num_queues=4, quantum_base=8, quantum_growth=2.0, starvation_beta=None)
RETAINED_L1, LIVE_L1 = 9.0, 7.0  # ranks of a program whose next call enters level 1
A_PROMPT = list(range(200, 208))  # two full blocks


def make_sim(num_blocks: int = 9, num_host_blocks: int = 0, **config) -> Sim:
    """PLAS with prefix caching and 4-token blocks (block 0 is the null block)."""
    return Sim("plas", num_blocks=num_blocks, block_size=4, num_host_blocks=num_host_blocks,
               prefix_caching=True, **{**LEVELS, **config})


def add_call(sim: Sim, program: str, call_id: str, tokens, output_len: int,
             expected: float | None = None) -> SimCall:
    """Queue a SimCall with the given prompt tokens (the harness's prompts share nothing)."""
    tokens = list(tokens)
    return sim.call(program, call_id, len(tokens), output_len, expected_tool_seconds=expected,
                    token_ids=tokens)


def run_first_call(sim: Sim, expected: float | None = 10.0) -> SimCall:
    """Program A's call a1 (8-token prompt, 4 tokens out) runs alone and finishes at t=4 on
    blocks [1, 2, 3]: 11 tokens of service (level 1 next), blocks 1 and 2 cached."""
    sim.start("A")
    a1 = add_call(sim, "A", "a1", A_PROMPT, 4, expected)
    sim.run_until("a1")
    assert (sim.now, sim.scheduler.table.get("A").service) == (4.0, 11.0)
    assert (sim.kv.pool.is_cached(1), sim.kv.pool.is_cached(2), sim.kv.pool.is_cached(3)) == \
        (True, True, False)
    return a1


def ranks(sim: Sim, blocks=(1, 2)) -> list[float | None]:
    return [sim.kv.pool.free_rank(b) for b in blocks]


def step_until(sim: Sim, now: float) -> None:
    while sim.now < now:
        sim.step()
        sim.scheduler.check_integrity()


def test_a_lower_priority_call_waits_rather_than_evict_retained_kv():
    sim = make_sim(num_blocks=9)  # 8 usable
    a1 = run_first_call(sim)
    assert ranks(sim) == [RETAINED_L1, RETAINED_L1]
    stats = sim.scheduler.stats()
    assert (stats["retentions"], stats["retained_blocks"]) == (1, 2)

    sim.start("R")
    r1 = add_call(sim, "R", "r1", range(300, 308), 6)  # level 0: runs, 4 blocks at most
    sim.start("L")
    sim.scheduler.table.get("L").service = 100.0  # level 3: may evict rank <= 2 only
    l1 = add_call(sim, "L", "l1", range(400, 420), 2)  # needs 5 blocks; 4 are plain
    plan = sim.step()
    assert [c.call.call_id for c in plan.chunks] == ["r1"]
    assert l1.status is CallStatus.WAITING and sim.kv.block_table("l1") == []
    assert ranks(sim) == [RETAINED_L1, RETAINED_L1]

    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    plan = sim.step()
    assert [(c.call.call_id, c.start, c.num_tokens) for c in plan.chunks] == \
        [("r1", 8, 1), ("a2", 8, 8)]
    assert a2.num_cached_tokens == 8
    assert sim.kv.block_table("a2") == [1, 2, 7, 8]
    while r1.status is not CallStatus.FINISHED:
        assert l1.status is CallStatus.WAITING
        sim.step()
        sim.scheduler.check_integrity()
    sim.step()  # nothing runs: the waiting call may now evict anything
    assert l1.status is CallStatus.RUNNING
    sim.run_clean()
    assert sim.completed == ["a1", "a2", "r1", "l1"]
    assert sim.scheduler.stats()["num_preemptions"] == 0


@pytest.mark.parametrize("by_level", [True, False])
def test_a_higher_level_evicts_retained_kv_only_with_ranks_by_level(by_level):
    """X (1 block) runs; R (level 0) then needs 6 blocks where 5 are plain. Ranked by
    level, A's KV retained at level 1 (rank 9) is below R's admission rank (11): R takes A's
    tail block at once. Without (`kv_ranks_by_level=False`, every rank at the last level),
    A's retained rank is 3 and R's admission rank 2: R waits while anything runs."""
    sim = make_sim(num_blocks=9, kv_ranks_by_level=by_level)
    run_first_call(sim)
    assert ranks(sim) == ([RETAINED_L1] * 2 if by_level else [3.0, 3.0])
    sim.start("X")
    x1 = add_call(sim, "X", "x1", range(500, 504), 3)
    sim.start("R")
    r1 = add_call(sim, "R", "r1", range(300, 324), 2)
    sim.step()
    sim.scheduler.check_integrity()
    assert x1.status is CallStatus.RUNNING
    if by_level:
        assert r1.status is CallStatus.RUNNING
        assert 2 in sim.kv.block_table("r1") and sim.kv.pool.free_rank(1) == RETAINED_L1
    else:
        while x1.status is not CallStatus.FINISHED:
            assert r1.status is CallStatus.WAITING and ranks(sim) == [3.0, 3.0]
            sim.step()
            sim.scheduler.check_integrity()
    sim.run_clean()
    assert sim.completed == ["a1", "x1", "r1"]


def test_with_lru_memory_every_rank_is_zero_and_the_prefix_is_lost():
    sim = make_sim(num_blocks=9, num_host_blocks=4, kv_memory="lru")
    a1 = run_first_call(sim)
    assert ranks(sim) == [0.0, 0.0]
    sim.start("R")
    add_call(sim, "R", "r1", range(300, 308), 6)
    sim.start("L")
    sim.scheduler.table.get("L").service = 100.0
    l1 = add_call(sim, "L", "l1", range(400, 420), 2)
    sim.step()
    assert l1.status is CallStatus.RUNNING
    assert sim.kv.block_table("l1") == [6, 7, 8, 3, 2]  # evicted A's tail block to get in
    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    sim.step()  # r1's next block evicts A's head block before a2 is admitted
    assert sim.kv.block_table("r1") == [4, 5, 1]
    sim.run_clean()
    assert a2.num_cached_tokens == 0
    cached = [b for b in range(1, 9) if sim.kv.pool.is_cached(b)]
    assert cached and all(sim.kv.pool.free_rank(b) == 0.0 for b in cached)
    stats = sim.scheduler.stats()
    assert (stats["retentions"], stats["offloaded_blocks"], stats["fetched_blocks"]) == (0, 0, 0)


def test_retention_expires_after_the_ttl_factor_times_the_hint():
    sim = make_sim(retention_ttl_factor=2.0)
    run_first_call(sim, expected=3.0)  # finished at t=4: retained until t=10
    step_until(sim, 10.0)  # rounds planned at t=4..9
    assert ranks(sim) == [RETAINED_L1, RETAINED_L1]
    assert sim.scheduler.stats()["retentions_expired"] == 0
    sim.step()  # the round planned at t=10
    assert ranks(sim) == [LIVE_L1, LIVE_L1]
    stats = sim.scheduler.stats()
    assert (stats["retentions_expired"], stats["retained_blocks"]) == (1, 0)
    sim.run_clean()


@pytest.mark.parametrize("config, ttl", [
    (dict(retention_prior_seconds=1.5), 3.0),  # no gap seen yet: the prior
    (dict(), 2.0),  # the default prior of 1 s
])
def test_without_a_hint_the_first_retention_uses_the_prior(config, ttl):
    sim = make_sim(**config)
    run_first_call(sim, expected=None)  # finished at t=4
    step_until(sim, 4.0 + ttl)
    assert sim.scheduler.stats()["retentions_expired"] == 0
    sim.step()
    assert sim.scheduler.stats()["retentions_expired"] == 1
    assert ranks(sim) == [LIVE_L1, LIVE_L1]


@pytest.mark.parametrize("config, ttl", [(dict(), 10.0), (dict(retention_max_seconds=4.0), 4.0)])
def test_without_a_hint_a_later_retention_uses_the_mean_observed_gap(config, ttl):
    sim = make_sim(num_blocks=17, **config)  # a budget of 8 blocks: a2's 5 fit
    a1 = run_first_call(sim, expected=None)  # its retention (the prior: 2 s) ends at t=6
    step_until(sim, 9.0)  # a tool gap of 5
    add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    sim.run_until("a2")
    done = sim.now
    assert sim.scheduler.stats()["retentions_expired"] == 1
    step_until(sim, done + ttl)
    assert sim.scheduler.stats()["retentions_expired"] == 1
    sim.step()
    assert sim.scheduler.stats()["retentions_expired"] == 2


def test_the_retention_budget_leaves_a_second_program_unretained():
    sim = make_sim(num_blocks=17, retention_budget=0.1875)  # 16 usable: 3 blocks of budget
    assert sim.scheduler.memory.budget_blocks == 3
    sim.start("A")
    sim.start("B")
    add_call(sim, "A", "a1", A_PROMPT, 4, expected=10.0)  # blocks [1, 2, 5]
    add_call(sim, "B", "b1", range(300, 308), 4, expected=10.0)  # blocks [3, 4, 6]
    sim.run()
    assert sim.completed == ["a1", "b1"]  # in one step: a1 is retained first
    assert ranks(sim, (1, 2, 3, 4)) == [RETAINED_L1, RETAINED_L1, LIVE_L1, LIVE_L1]
    stats = sim.scheduler.stats()
    assert (stats["retentions"], stats["retained_blocks"]) == (1, 2)  # its 2 cached blocks
    add_call(sim, "A", "a2", A_PROMPT + [1], 1)  # A's next call ends its tool-call retention
    assert sim.scheduler.stats()["retained_blocks"] == 0
    sim.run_clean()


def test_the_retention_budget_counts_only_the_blocks_it_keeps():
    sim = make_sim(num_blocks=9, retention_budget=0.25)  # a budget of 2 blocks
    run_first_call(sim)  # blocks [1, 2, 3]: 1 and 2 cached, 3 back on the plain list
    assert ranks(sim, (1, 2, 3)) == [RETAINED_L1, RETAINED_L1, None]
    assert sim.scheduler.stats()["retained_blocks"] == 2


def test_the_retention_budget_counts_only_the_blocks_still_kept_on_the_device():
    """Retained blocks evicted since (here: offloaded to host) leave the budget, so a second
    program fits in it again; blocks a call takes back leave it too."""
    sim = make_sim(num_blocks=9, num_host_blocks=4, retention_budget=0.25)  # 2 blocks
    a1 = run_first_call(sim)  # A retains blocks 1 and 2
    assert sim.scheduler.stats()["retained_blocks"] == 2
    sim.scheduler.start_program(sim.now, "X", ephemeral=True)
    add_call(sim, "X", "x1", range(300, 328), 1)  # 7 blocks: 6 plain and A's tail block
    assert sim.step().swap_out == [(2, 0)]
    assert (sim.completed[-1], ranks(sim, (1,))) == ("x1", [RETAINED_L1])
    assert sim.scheduler.stats()["retained_blocks"] == 1

    sim.start("C")
    add_call(sim, "C", "c1", range(500, 504), 2, expected=10.0)  # leaves 1 cached block
    sim.run_until("c1")
    stats = sim.scheduler.stats()
    assert (stats["retentions"], stats["retained_blocks"]) == (2, 2)  # A's 1 and C's 1
    assert ranks(sim, (1, 2, 3)) == [RETAINED_L1, RETAINED_L1 + 3, None]  # C's: level 0

    sim.start("B")  # a prefix hit on A's block takes it off the cached list while b1 runs
    add_call(sim, "B", "b1", a1.all_token_ids[:4] + [7, 8], 4)
    sim.step()
    assert (sim.calls["b1"].num_cached_tokens, sim.kv.block_table("b1")[0]) == (4, 1)
    assert sim.scheduler.stats()["retained_blocks"] == 1
    sim.run_clean()


def test_ending_a_program_ranks_its_kv_zero_and_releases_its_retention():
    sim = make_sim()
    run_first_call(sim)
    assert sim.scheduler.stats()["retained_blocks"] == 2
    sim.scheduler.end_program("A", sim.now)
    assert ranks(sim) == [0.0, 0.0]
    stats = sim.scheduler.stats()
    assert (stats["retained_blocks"], stats["retentions"]) == (0, 1)
    step_until(sim, 30.0)  # its old deadline (t=24) passes: nothing left to expire
    assert sim.scheduler.stats()["retentions_expired"] == 0
    sim.run_clean()


def offloaded_setup(**config) -> tuple[Sim, SimCall]:
    """A's a1 finished and retained; then B's 32-token prompt, admitted while nothing runs,
    takes every device block: A's two cached blocks go to host blocks 0 and 1."""
    sim = make_sim(num_blocks=9, num_host_blocks=4, **config)
    a1 = run_first_call(sim)
    sim.start("B")
    add_call(sim, "B", "b1", range(300, 332), 1)
    plan = sim.step()
    assert plan.swap_out == [(2, 0), (1, 1)]  # tail first
    assert sim.completed[-1] == "b1"
    assert sim.kv.host_pool.num_cached == 2
    assert sim.scheduler.stats()["offloaded_blocks"] == 2
    sim.scheduler.check_integrity()
    return sim, a1


def test_offloaded_kv_of_a_live_program_is_fetched_for_its_next_call():
    sim, a1 = offloaded_setup()
    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    plan = sim.step()
    assert plan.swap_in == [(1, 1), (0, 2)]  # (host, device): block 0 of the prefix first
    assert [(c.call.call_id, c.start, c.num_tokens) for c in plan.chunks] == [("a2", 8, 8)]
    assert a2.num_cached_tokens == 8
    assert sim.scheduler.stats()["fetched_blocks"] == 2
    sim.run_clean()


@pytest.mark.parametrize("how", ["end", "expire"])
def test_ending_or_expiring_a_program_with_offloaded_kv_leaks_nothing(how):
    sim, _ = offloaded_setup(program_ttl=20.0)  # A's last activity was at t=4
    if how == "end":
        sim.scheduler.end_program("A", sim.now)
    else:
        step_until(sim, 25.0)
    assert "A" not in sim.scheduler.table
    assert sim.scheduler.stats()["retained_blocks"] == 0
    sim.run_clean()
    assert sim.kv.host_pool.num_cached == 2  # still findable, now nobody's (rank 0)


def test_without_re_ranking_the_tail_is_evicted_first_and_the_prefix_survives_in_two_tiers():
    sim = make_sim(num_blocks=9, num_host_blocks=4)
    a1 = run_first_call(sim)
    sim.start("B")
    add_call(sim, "B", "b1", range(300, 328), 1)  # 7 blocks: evicts one of A's
    assert sim.step().swap_out == [(2, 0)]
    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    sim.run_clean()
    assert a2.num_cached_tokens == 8  # block 0 on the device, block 1 fetched


def test_after_retention_expiry_the_tail_is_still_evicted_first():
    sim = make_sim(num_blocks=9, num_host_blocks=4)
    a1 = run_first_call(sim, expected=1.0)  # retained until t=6
    step_until(sim, 7.0)
    assert ranks(sim) == [LIVE_L1, LIVE_L1]
    sim.start("B")
    add_call(sim, "B", "b1", range(300, 328), 1)
    sim.step()
    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [1, 2, 3, 4], 2)
    sim.run_clean()
    assert a2.num_cached_tokens == 8


def test_an_admission_fetching_from_a_full_host_pool_does_not_crash():
    sim = make_sim(num_blocks=4, num_host_blocks=1)  # 3 usable device blocks, 1 host block
    sim.start("A")
    a1 = add_call(sim, "A", "a1", [50, 51, 52], 2)  # 4 computed tokens: block 1, cached
    sim.run_until("a1")
    sim.start("B")
    add_call(sim, "B", "b1", range(300, 311), 2)  # 12 computed tokens: all 3 blocks
    sim.run_until("b1")  # A's block went to the one host block; B's 3 are cached (rank 5)
    assert (sim.kv.host_pool.num_cached, sim.kv.pool.num_evictable(0.0)) == (1, 0)
    a2 = add_call(sim, "A", "a2", a1.all_token_ids + [60, 61, 62], 1)
    sim.step()  # fetching A's block evicts one of B's, whose offload needs a host block
    assert a2.num_cached_tokens == 4
    sim.run_clean()


def test_service_half_life_halves_an_idle_programs_service():
    sim = make_sim(program_service_halflife=10.0)
    a1 = run_first_call(sim)  # 11 tokens of service, last call completed at t=4
    step_until(sim, 14.0)
    add_call(sim, "A", "a2", a1.all_token_ids + [1], 1)
    record = sim.scheduler.records["a2"]
    assert sim.scheduler.table.get("A").service == 5.5
    assert (record.start_value, record.queue) == (5.5, 0)  # level 0 instead of 1
    sim.run_until("a2")  # a prefix hit of 8 tokens: 5 tokens of service
    assert sim.scheduler.table.get("A").service == 10.5
    step_until(sim, sim.now + 20.0)  # two half-lives
    add_call(sim, "A", "a3", [9, 9], 1)
    assert sim.scheduler.table.get("A").service == 10.5 / 4
    sim.run_clean()


def test_service_half_life_keeps_the_tenant_floor():
    sim = make_sim(program_service_halflife=10.0)
    sim.start("P1", tenant="t")
    add_call(sim, "P1", "c0", A_PROMPT, 4)
    sim.run_until("c0")
    sim.scheduler.end_program("P1", sim.now)  # the tenant's recent service: 11 at t=4
    sim.start("P2", tenant="t")
    assert sim.scheduler.table.get("P2").service == 11.0  # its floor
    add_call(sim, "P2", "c1", range(300, 308), 4)
    sim.run_until("c1")  # finished at t=8 with 11 + 11
    assert (sim.now, sim.scheduler.table.get("P2").service) == (8.0, 22.0)
    step_until(sim, 18.0)
    add_call(sim, "P2", "c2", [5, 6], 1)
    assert sim.scheduler.table.get("P2").service == 11.0 + 5.5
    sim.run_clean()


def test_without_a_half_life_service_does_not_decay():
    sim = make_sim()
    a1 = run_first_call(sim)
    step_until(sim, 100.0)
    add_call(sim, "A", "a2", a1.all_token_ids + [1], 1)
    assert sim.scheduler.table.get("A").service == 11.0
    assert sim.scheduler.records["a2"].queue == 1
    sim.run_clean()
