"""First-token and inter-token deadlines: exact promotion times and schedules on scripted
programs (harness: token-mode service, one step per clock unit, one seat, quanta 8, 16, ...,
recompute preemption, no anti-starvation)."""

from __future__ import annotations

import pytest

from bench.sim.sim_call import SimCall
from harness import Sim
from scheduler.config import SchedulerConfig
from scheduler.deadlines import DeadlineWatch

BASE = dict(max_num_seqs=1, num_queues=8, quantum_base=8, quantum_growth=2.0,
            starvation_beta=None)


def test_watch_pops_only_live_deadlines_in_order():
    watch = DeadlineWatch()
    watch.watch("a", 5.0)
    watch.watch("b", 3.0)
    watch.watch("c", 4.0)
    watch.watch("a", 9.0)  # replaces a's 5
    watch.forget("c")
    assert len(watch) == 2
    assert watch.due(5.0) == ["b"]
    assert watch.due(8.9) == []
    assert watch.due(9.0) == ["a"]
    assert len(watch) == 0


def test_the_heap_holds_at_most_twice_the_live_deadlines_under_churn():
    watch = DeadlineWatch()
    for i in range(1000):  # far deadlines, forgotten long before they fall due
        watch.watch(f"c{i}", 1e6 + i)
        watch.watch(f"c{i}", 2e6 + i)  # replaced
        if i >= 3:
            watch.forget(f"c{i - 3}")
        assert watch.num_entries <= 2 * len(watch)
    assert len(watch) == 3
    watch.watch("tie", 2e6 + 998)  # same deadline as c998, watched later
    assert watch.due(3e6) == ["c997", "c998", "tie", "c999"]
    assert (len(watch), watch.num_entries) == (0, 0)


def old_call_behind_newcomers(ttft_slo: float | None, **config) -> Sim:
    """`old` has had 75 of service (queue level 3 for its next call); at t = 40 two
    one-call programs arrive with old-5 (prompt 8, output 8 each); runs to the end."""
    sim = Sim("atlas", **{**BASE, **config})
    sim.start("old")
    for i in range(5):
        sim.call("old", f"old-{i}", prompt_len=8, output_len=8)
        sim.run_until(f"old-{i}")
    assert sim.now == 40
    for name in ("n1", "n2"):
        sim.start(name)
        sim.call(name, name, prompt_len=8, output_len=8)
    sim.scheduler.add(SimCall("old-5", 8, 8, sim.now, 99), sim.now, "old",
                      ttft_slo_seconds=ttft_slo)
    sim.run_clean()
    return sim


def first_token_step(sim: Sim, call_id: str) -> float:
    """The clock at the end of the step that sampled `call_id`'s first token."""
    for t, plan in enumerate(sim.plans, start=1):
        if any(c.call.call_id == call_id and c.samples for c in plan.chunks):
            return float(t)
    raise AssertionError(f"{call_id} sampled nothing")


def test_without_a_deadline_the_old_programs_call_waits_for_both_newcomers():
    sim = old_call_behind_newcomers(None)
    assert sim.completed[-3:] == ["n2", "n1", "old-5"]
    assert first_token_step(sim, "old-5") == 57
    assert sim.scheduler.num_deadline_promotions == 0


def test_a_first_token_deadline_promotes_the_call_and_lets_it_preempt():
    # due at 40 + 3 less its 8-token prefill estimate (8 / 10,000 s): the round at t = 43
    # promotes it, and it preempts n2 (demoted to level 1 by its prefill)
    sim = old_call_behind_newcomers(3.0)
    assert sim.plans[43].preempted.keys() == {"n2"}
    assert [c.call.call_id for c in sim.plans[43].chunks] == ["old-5"]
    assert first_token_step(sim, "old-5") == 44
    assert sim.completed[-3:] == ["old-5", "n1", "n2"]
    assert sim.scheduler.num_deadline_promotions == 1


def test_the_config_deadline_applies_to_every_call_and_a_met_one_promotes_nothing():
    sim = old_call_behind_newcomers(None, ttft_slo_seconds=3.0)
    # n1 and n2 get their first tokens at 41 and 42 (before 43): only old-5 is promoted
    assert first_token_step(sim, "old-5") == 44
    assert sim.scheduler.num_deadline_promotions == 1


@pytest.mark.parametrize("tokens, prior", [(30_008, 10_000.0), (3_008, 1_000.0)])
def test_a_deadline_in_tokens_is_their_prefill_time_at_the_engines_speed(tokens, prior):
    # (tokens - the 8-token prompt) / prior = 3 s after t = 40: the 3-second case above
    sim = old_call_behind_newcomers(None, ttft_slo_tokens=tokens,
                                    prefill_tokens_per_second=prior)
    assert sim.plans[43].preempted.keys() == {"n2"}
    assert first_token_step(sim, "old-5") == 44
    assert sim.scheduler.num_deadline_promotions == 1


def test_a_deadline_in_seconds_wins_over_one_in_tokens():
    # 20,008 tokens alone would make old-5 due at t = 42; the config's 3 s and a request's
    # 3 s both make it due at 43
    for request, config in ((None, dict(ttft_slo_seconds=3.0)), (3.0, {})):
        sim = old_call_behind_newcomers(request, ttft_slo_tokens=20_008, **config)
        assert sim.plans[43].preempted.keys() == {"n2"}
        assert first_token_step(sim, "old-5") == 44
    assert first_token_step(old_call_behind_newcomers(None, ttft_slo_tokens=20_008),
                            "old-5") == 43


def test_an_inter_token_deadline_promotes_a_preempted_stream_that_then_waits_for_a_seat():
    sim = old_call_behind_newcomers(3.0, itl_slo_seconds=2.0)
    # n1 sampled its first token in its prefill (t = 41) and was preempted by n2: due at 43,
    # with old-5. Both go to level 0, n1 first (it arrived first); n1 may not preempt, so it
    # waits for n2's seat and, at the head of the level, holds old-5 back until n2 is done.
    # The trade-off that keeps itl_slo_seconds off by default.
    assert [list(plan.preempted) for plan in sim.plans[40:]].count([]) == 22
    assert sim.plans[50].preempted.keys() == {"n1"}  # old-5 in, n1 demoted by its prefill
    assert first_token_step(sim, "old-5") == 51
    assert sim.completed[-3:] == ["n2", "old-5", "n1"]
    assert sim.scheduler.num_deadline_promotions == 3  # n1 twice, old-5 once


@pytest.mark.parametrize("field", ["ttft_slo_seconds", "itl_slo_seconds"])
@pytest.mark.parametrize("value", [0.0, -1.0, float("inf")])
def test_deadlines_must_be_positive_and_finite(field, value):
    with pytest.raises(ValueError, match=field):
        SchedulerConfig(**{field: value})


@pytest.mark.parametrize("value", [0, -5, 10_000_001, 2.5, True])
def test_a_deadline_in_tokens_is_a_bounded_positive_int(value):
    with pytest.raises(ValueError, match="ttft_slo_tokens"):
        SchedulerConfig(ttft_slo_tokens=value)
