"""Hand-built scenarios with exact completion orders and priority values, per policy.

Token-mode service (a prefill chunk of n tokens costs n, a decode step 1), quanta 8, 16,
32, ... (level bounds 8, 24, 56, 120, ...), one seat (`max_num_seqs=1`) so the schedule order
is the completion order, anti-starvation off unless a test turns it on.
"""

from __future__ import annotations

import pytest

from harness import Sim

BASE = dict(max_num_seqs=1, num_queues=8, quantum_base=8, quantum_growth=2.0,
            starvation_beta=None)


def long_program_then_newcomers(policy: str) -> Sim:
    """`long` runs five 15-service calls, then calls again; three one-call programs arrive
    one step after that call started."""
    sim = Sim(policy, **BASE)
    sim.start("long")
    for i in range(5):
        sim.call("long", f"long-{i}", prompt_len=8, output_len=8)
        sim.run_until(f"long-{i}")
    sim.call("long", "long-5", prompt_len=8, output_len=8)
    sim.step()
    for name in ("s1", "s2", "s3"):
        sim.start(name)
        sim.call(name, name, prompt_len=8, output_len=8)
    sim.run()
    return sim


@pytest.mark.parametrize("policy, order", [
    ("fcfs", ["long-5", "s1", "s2", "s3"]),
    ("las", ["s3", "long-5", "s1", "s2"]),
    ("plas", ["s3", "s1", "s2", "long-5"]),
    ("atlas", ["s3", "s1", "s2", "long-5"]),
])
def test_completion_order_after_a_long_program_calls_again(policy, order):
    sim = long_program_then_newcomers(policy)
    assert sim.completed[5:] == order
    # long-5 alone: prefill 8 + 7 decodes = 15. Preempted after its prefill, it recomputes
    # 9 tokens (prompt + its first token) and decodes 6 more: 8 + 9 + 6 = 23.
    assert sim.scheduler.table.get("long").service == 5 * 15 + (15 if policy == "fcfs" else 23)


def test_plas_and_atlas_start_the_long_programs_call_in_a_low_queue():
    for policy in ("plas", "atlas"):
        sim = Sim(policy, **BASE)
        sim.start("long")
        for i in range(5):
            sim.call("long", f"long-{i}", prompt_len=8, output_len=8)
            sim.run_until(f"long-{i}")
        sim.call("long", "long-5")
        record = sim.scheduler.records["long-5"]
        assert record.start_value == 75
        assert record.queue == 3  # 56 <= 75 < 120


def run_fan_out(policy: str) -> Sim:
    """c0 (service 15), then four parallel threads (service 15 each), then a join call."""
    sim = Sim(policy, **{**BASE, "max_num_seqs": 8})
    sim.start("p")
    sim.call("p", "c0", prompt_len=8, output_len=8)
    sim.run()
    for t in range(4):
        sim.call("p", f"t{t}", prompt_len=8, output_len=8, thread_id=f"thread-{t}")
    starts = [sim.scheduler.records[f"t{t}"].start_value for t in range(4)]
    queues = [sim.scheduler.records[f"t{t}"].queue for t in range(4)]
    sim.run()
    sim.call("p", "join", prompt_len=8, output_len=4)
    sim.starts, sim.queues = starts, queues
    return sim


def test_atlas_parallel_threads_share_the_programs_value_and_join_inherits_critical_path():
    sim = run_fan_out("atlas")
    assert sim.starts == [15, 15, 15, 15]
    assert sim.queues == [1, 1, 1, 1]
    assert sim.scheduler.table.get("p").service == 30  # max(15, 15 + 15), not the sum
    assert sim.scheduler.records["join"].start_value == 30


def test_plas_parallel_threads_use_the_sum():
    sim = run_fan_out("plas")
    assert sim.starts == [15, 15, 15, 15]
    assert sim.scheduler.table.get("p").service == 15 + 4 * 15
    assert sim.scheduler.records["join"].start_value == 75


def test_a_call_is_demoted_exactly_when_its_quantum_is_used_up():
    sim = Sim("las", **BASE)
    sim.start("p")
    sim.call("p", "c", prompt_len=4, output_len=30)
    record = sim.scheduler.records["c"]
    seen = []
    for _ in range(14):
        sim.step()
        seen.append((record.total_service, record.queue))
    # prefill 4, then one per decode: quantum 8 is used up at service 8, 16 more at 24.
    assert seen == [(4, 0), (5, 0), (6, 0), (7, 0), (8, 1), (9, 1), (10, 1), (11, 1),
                    (12, 1), (13, 1), (14, 1), (15, 1), (16, 1), (17, 1)]
    while record.total_service < 24:
        sim.step()
    assert (record.total_service, record.queue) == (24, 2)


def test_mlfq_enters_by_its_first_step():
    sim = Sim("mlfq", **BASE)
    sim.start("p")
    sim.call("p", "c", prompt_len=20, output_len=4)
    sim.step()  # first step: a 20-token prefill; the first quantum >= 20 is level 2's (32)
    record = sim.scheduler.records["c"]
    assert (record.queue, record.quantum_left) == (2, 12)


def test_oracle_runs_the_shortest_remaining_program_first():
    sim = Sim("oracle", **BASE)
    for name, work in (("big", 500.0), ("small", 20.0), ("mid", 100.0)):
        sim.start(name)
        sim.scheduler.table.get(name).oracle_work = work
        sim.call(name, name)
    sim.run()
    assert sim.completed == ["small", "mid", "big"]


def test_oracle_preempts_a_longer_program_and_never_demotes():
    sim = Sim("oracle", **BASE)
    sim.start("big")
    sim.scheduler.table.get("big").oracle_work = 500.0  # level 5 (248 <= 500 < 504)
    sim.call("big", "big", prompt_len=8, output_len=40)
    for _ in range(20):
        sim.step()
    big = sim.scheduler.records["big"]
    assert (big.queue, big.total_service) == (5, 27)  # running: prefill 8 + 19 decodes
    sim.start("small")
    sim.scheduler.table.get("small").oracle_work = 20.0  # level 1 (8 <= 20 < 24)
    sim.call("small", "small")
    sim.step()
    assert sim.scheduler.calls["big"].num_preemptions == 1
    sim.run()
    assert sim.completed == ["small", "big"]


def test_oracle_keeps_its_level_past_the_quantum():
    sim = Sim("oracle", **BASE)
    sim.start("p")
    sim.scheduler.table.get("p").oracle_work = 10.0  # level 1: quantum 16
    sim.call("p", "c", prompt_len=8, output_len=30)
    for _ in range(25):
        sim.step()
    record = sim.scheduler.records["c"]
    assert (record.queue, record.total_service) == (1, 32)


def test_anti_starvation_promotes_exactly_when_the_ratio_crosses_beta():
    sim = Sim("plas", **{**BASE, "num_queues": 3, "starvation_beta": 0.3})
    sim.start("old")
    sim.scheduler.table.get("old").service = 100.0
    sim.call("old", "old-call")  # level 2; W crosses 0.3 * 100 after 30 steps of waiting
    hogs = 0
    levels, resets = [], []
    record = sim.scheduler.records["old-call"]
    while sim.now < 40:
        waiting_hogs = sum(1 for c in sim.scheduler.queued if c.startswith("hog"))
        while waiting_hogs < 2:
            sim.start(f"hog{hogs}")
            sim.call(f"hog{hogs}", f"hog{hogs}", prompt_len=4, output_len=10)
            hogs, waiting_hogs = hogs + 1, waiting_hogs + 1
        sim.step()
        levels.append(record.queue)
        resets.append((record.wait, record.service, record.waiting_since))
    assert levels[:30] == [2] * 30
    assert levels[30] == 0
    # Its own W restarts from the promotion (waits are folded in when it stops waiting).
    assert resets[29] == (0.0, 0.0, 0.0) and resets[30] == (0.0, 0.0, 30.0)
    assert record.total_wait >= 30
    assert sim.scheduler.table.get("old").service == 100.0  # the program's T is kept


def test_a_promoted_call_waits_for_room_instead_of_preempting():
    sim = Sim("plas", **{**BASE, "num_queues": 3, "starvation_beta": 0.3})
    sim.start("runner")
    sim.scheduler.table.get("runner").service = 10.0  # level 1 (8 <= 10 < 24)
    sim.call("runner", "runner", prompt_len=8, output_len=60)
    sim.start("old")
    sim.scheduler.table.get("old").service = 100.0  # level 2; promoted after 30 steps
    sim.call("old", "old-call")
    while not sim.scheduler.num_promotions:
        sim.step()
    assert sim.scheduler.records["old-call"].queue == 0  # ahead of the runner's level ...
    sim.run()
    assert sim.calls["runner"].num_preemptions == 0  # ... but it did not evict the runner
    assert sim.completed == ["runner", "old-call"]
    assert sim.scheduler.num_promotions == 1


def test_the_starvation_watch_holds_only_waiting_calls_under_churn():
    """Calls far from starving (beta 5 of 100 service: 500 steps) come and go, one a step,
    through two seats: only those still waiting are watched, and stale heap entries never
    exceed the live ones."""
    sim = Sim("plas", **{**BASE, "max_num_seqs": 2, "num_queues": 3, "starvation_beta": 5.0})
    watch = sim.scheduler.starvation
    for i in range(150):
        sim.start(f"p{i}")
        sim.scheduler.table.get(f"p{i}").service = 100.0  # level 2
        sim.call(f"p{i}", f"c{i}", prompt_len=2, output_len=3)
        sim.step()
        assert len(watch) == sim.scheduler.num_waiting
        assert watch.num_entries <= 2 * len(watch)
    assert (len(watch), len(sim.completed)) == (50, 99)  # and 1 running
    sim.run_clean()
    assert (len(watch), watch.num_entries, sim.scheduler.num_promotions) == (0, 0, 0)


def test_anti_starvation_off_never_promotes():
    sim = Sim("plas", **{**BASE, "num_queues": 3, "starvation_beta": 0})
    sim.start("old")
    sim.scheduler.table.get("old").service = 100.0
    sim.call("old", "old-call")
    for i in range(60):
        sim.start(f"hog{i}")
        sim.call(f"hog{i}", f"hog{i}", prompt_len=4, output_len=3)
        sim.step()
    assert sim.scheduler.records["old-call"].queue == 2
    assert sim.scheduler.num_promotions == 0


def long_program_under_a_stream_of_short_ones(beta: float | None) -> tuple[float, float, int]:
    """(wait, service, calls done) of a 10-call program against short programs that alone
    keep the one seat busy (one every 2 steps, 2 steps of work each), within 1,000 steps.
    Preempted calls are swapped (recompute would inflate the long program's service)."""
    sim = Sim("plas", num_host_blocks=100, **{**BASE, "num_queues": 4,
                                               "starvation_beta": beta,
                                               "preemption_mode": "swap"})
    sim.start("long")
    for i in range(10):
        sim.call("long", f"long-{i}", prompt_len=8, output_len=8)
        while f"long-{i}" not in sim.completed and sim.now < 1000:
            if sim.now % 2 == 0:
                name = f"short{int(sim.now)}"
                sim.start(name)
                sim.call(name, name, prompt_len=2, output_len=2)
            sim.step()
    record = sim.scheduler.table.get("long")
    return record.wait, record.service, sum(c.startswith("long") for c in sim.completed)


@pytest.mark.parametrize("beta", [2.0, 4.0])
def test_anti_starvation_keeps_a_long_programs_wait_within_about_beta_times_its_service(beta):
    wait, service, done = long_program_under_a_stream_of_short_ones(beta)
    assert done == 10 and service == 10 * 15
    assert beta * service / 2 <= wait <= 1.5 * beta * service


def test_without_anti_starvation_the_long_program_starves():
    assert long_program_under_a_stream_of_short_ones(None)[2] == 0
