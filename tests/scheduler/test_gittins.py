"""The Gittins index and its learner (exact values on hand-checked distributions), and the
`gittins` and `pfcfs` policies on scripted programs: exact completion orders.

Scheduler scenarios use the test harness's token-mode service (a prefill chunk of n tokens
costs n, a decode 1), one seat, quanta 8, 16, 32, ... and no anti-starvation."""

from __future__ import annotations

import numpy as np
import pytest

from harness import Sim
from scheduler.gittins import IndexTable, SizeLearner, gittins_index
from scheduler.policies.gittins import GittinsPolicy

BASE = dict(max_num_seqs=1, num_queues=8, quantum_base=8, quantum_growth=2.0,
            starvation_beta=None)


def test_index_of_a_two_sample_distribution():
    # read as an atom at 1 and the other half of the mass spread evenly over (1, 10]
    sizes, ones = np.array([1.0, 10.0]), np.ones(2)
    # a = 0: budget 1 finishes half the mass at a cost of 1 each: 1 / 2; budget 10: 2 / 6.5
    assert gittins_index(sizes, ones, 0.0) == 0.5
    # a = 1: uniform on (1, 10]: the full budget finishes it for a mean of 4.5
    assert gittins_index(sizes, ones, 1.0) == 1 / 4.5
    # a = 5: uniform on (5, 10] (5/9 of the gap's mass), mean 2.5 to go
    assert gittins_index(sizes, ones, 5.0) == pytest.approx(1 / 2.5)
    assert gittins_index(sizes, ones, 10.0) is None  # nothing known past the largest size


def test_index_rises_with_service_for_equal_sizes_and_weights_scale_it():
    sizes = np.full(4, 10.0)
    assert gittins_index(sizes, np.ones(4), 0.0) == 4 / 40
    assert gittins_index(sizes, np.ones(4), 5.0) == 4 / 20
    # weights are the reward of finishing: halving them halves the index
    assert gittins_index(sizes, np.full(4, 0.5), 5.0) == 2 / 20


def test_table_of_a_heavy_tail_puts_fresh_programs_first_and_the_survivors_last():
    # 90% of programs take 1, 10% take 100: once past 1, a program is almost surely long
    table = IndexTable.build(np.array([1.0] * 90 + [100.0] * 10), np.ones(100))
    assert table.level(0.0, 8) == 0
    assert table.level(0.5, 8) == 0
    assert table.level(1.0, 8) == 7  # the lowest index of all: 99 to go, surely
    assert table.level(50.0, 8) == 6
    assert table.level(100.0, 8) == table.level(99.0, 8) == 1  # past every size: the trend


def test_table_of_alike_sizes_puts_the_most_served_first():
    sizes = np.random.default_rng(0).normal(100, 10, 200).clip(1)
    table = IndexTable.build(sizes, np.ones(200))
    levels = [table.level(a, 8) for a in (0, 20, 40, 60, 80, 100, 120)]
    assert levels == [7, 7, 7, 6, 6, 4, 2]


def test_learner_uses_a_class_once_it_has_enough_samples_else_everything():
    learner = SizeLearner(window=100, min_samples=4)
    for _ in range(3):
        learner.observe(("t", "short"), 1.0, 1.0)
    assert learner.table(("t", "short")) is None  # 3 samples overall: no table yet
    learner.observe(("t", "long"), 50.0, 1.0)
    overall = learner.table(("t", "short"))
    assert overall is not None and overall.limit == 50.0  # the overall table, for both
    assert learner.table(("t", "long")) is overall
    learner.observe(("t", "short"), 2.0, 1.0)
    assert learner.table(("t", "short")).limit == 2.0  # its own four samples
    assert learner.num_samples(("t", "short")) == 4 and learner.num_samples() == 5


def test_learner_follows_a_change_of_workload():
    learner = SizeLearner(window=64, min_samples=16)
    key = (None, None)
    for _ in range(64):  # heavy tail: fresh programs first
        for size in (1.0, 1.0, 1.0, 100.0):
            learner.observe(key, size, 1.0)
    assert learner.table(key).level(0.0, 8) == 0
    # alike programs replace every sample of the window; the table is rebuilt each time an
    # eighth of the window is new, so one more eighth makes sure the last build saw only them
    for _ in range(64 + 8):
        learner.observe(key, 100.0, 1.0)
    assert learner.num_samples(key) == 64
    table = learner.table(key)
    # G = 1 / (100 - a) rises 32-fold from 0 to the last grid point (96.875); 87.5, the grid
    # point below 90, is 0.4 of the way down its log range: level 3 of 8
    assert table.limit == 100.0 and table.level(0.0, 8) == 7 and table.level(90.0, 8) == 3


def test_learner_forgets_the_least_recent_class_past_its_bound():
    learner = SizeLearner(window=8, min_samples=1, max_classes=2)
    for key in ("a", "b", "c"):
        learner.observe(key, 1.0, 1.0)
    assert learner.num_samples("a") == 0 and learner.num_samples("c") == 1


@pytest.mark.parametrize("bad", [dict(window=0), dict(window=4, min_samples=5),
                                 dict(min_samples=0), dict(max_classes=0)])
def test_learner_rejects_bad_bounds(bad):
    with pytest.raises(ValueError):
        SizeLearner(**bad)


def trained(history: list[list[int]], **overrides) -> Sim:
    """A `gittins` Sim (BASE with `overrides`) whose learner has seen 16 finished programs,
    program i making the sequential calls of output lengths `history[i % len(history)]`
    (prompt 8 each)."""
    sim = Sim("gittins", **{**BASE, **overrides})
    for i in range(16):
        name = f"train-{i}"
        sim.start(name)
        for j, output in enumerate(history[i % len(history)]):
            sim.call(name, f"{name}-{j}", prompt_len=8, output_len=output)
            sim.run_until(f"{name}-{j}")
        sim.scheduler.end_program(name, sim.now)
    return sim


def old_program_returns_with_two_newcomers(sim: Sim) -> list[str]:
    """`old` makes a call (service 15), then calls again just as `new-1` and `new-2` start;
    returns the completion order of those three calls."""
    sim.start("old")
    sim.call("old", "old-0", prompt_len=8, output_len=8)
    sim.run_until("old-0")
    done = len(sim.completed)
    for name in ("new-1", "new-2"):
        sim.start(name)
        sim.call(name, name, prompt_len=8, output_len=8)
    sim.call("old", "old-1", prompt_len=8, output_len=8)
    sim.run()
    sim.scheduler.check_integrity()
    return sim.completed[done:]


def test_gittins_is_program_fcfs_when_programs_are_alike():
    # every program made two calls of service 15: one that has had 15 is half done
    sim = trained([[8, 8]])
    assert old_program_returns_with_two_newcomers(sim) == ["old-1", "new-1", "new-2"]


def test_gittins_is_least_attained_service_under_a_heavy_tail():
    # most programs make one call of service 15, one in four goes on for ten
    sim = trained([[8], [8], [8], [8] * 10])
    assert old_program_returns_with_two_newcomers(sim) == ["new-1", "new-2", "old-1"]


@pytest.mark.parametrize("history", [[[8, 8]], [[8], [8], [8], [8] * 10]])
def test_inside_one_level_calls_go_in_program_order(history):
    # one level: whatever the index, the older program's call goes first (program FCFS)
    order = ["old-1", "new-1", "new-2"]
    sim = trained(history, num_queues=1)
    assert old_program_returns_with_two_newcomers(sim) == order


def test_gittins_is_program_fcfs_until_it_has_seen_enough_programs():
    # every call waits in the last level, in its program's start order, as under pfcfs
    sim = Sim("gittins", **BASE)
    assert old_program_returns_with_two_newcomers(sim) == ["old-1", "new-1", "new-2"]
    pfcfs = Sim("pfcfs", **BASE)
    assert old_program_returns_with_two_newcomers(pfcfs) == ["old-1", "new-1", "new-2"]
    assert sim.scheduler.policy.learner.num_samples() == 0  # no program ended


def test_gittins_learns_per_program_class():
    sim = trained([[8, 8]])
    sim.scheduler.start_program(sim.now, "other", program_class="search")
    assert sim.scheduler.table.get("other").program_class == "search"
    sim.scheduler.end_program("other", sim.now)  # no service: not a sample
    assert sim.scheduler.policy.learner.num_samples((None, "search")) == 0
    assert sim.scheduler.policy.learner.num_samples((None, None)) == 16


@pytest.mark.parametrize("policy, order", [("fcfs", ["a1", "b1", "a2"]),
                                           ("pfcfs", ["a1", "a2", "b1"])])
def test_program_fcfs_serves_an_older_programs_later_call_first(policy, order):
    sim = Sim(policy, **BASE)
    sim.start("a")
    sim.call("a", "a1", prompt_len=8, output_len=8)
    sim.step()
    sim.start("b")
    sim.call("b", "b1", prompt_len=8, output_len=8)
    sim.step()
    sim.call("a", "a2", prompt_len=8, output_len=8)  # a's next call, after b's first
    sim.run_clean()
    assert sim.completed == order


def test_classes_share_one_scale_so_short_programs_rank_above_long_ones():
    # two classes of alike programs, one 100 times longer: each table alone would put its
    # fresh programs at its own last level; on the shared scale the short class's fresh
    # programs rank above the long class's
    learner = SizeLearner(window=64, min_samples=8)
    for i in range(16):
        learner.observe("short", 10.0 + i % 4, 1.0)
        learner.observe("long", 1000.0 + 100 * (i % 4), 1.0)
    assert learner.table("short").level(0.0, 8) == learner.table("long").level(0.0, 8) == 7
    assert learner.level("short", 0.0, 8) < learner.level("long", 0.0, 8)
    assert learner.level("long", 0.0, 8) == 7
    assert learner.level("unknown", 0.0, 8) is not None  # the overall table
    assert SizeLearner().level("any", 0.0, 8) is None
