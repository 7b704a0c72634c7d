"""The retention rule learnt from tool times (scheduler.tool_times): the return-time table
on scripted samples, the chosen τ as value and price move, the prefetch quantile, and a
learner that follows a change of workload and falls back to every class's samples."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.tool_times import ReturnTimes, ToolTimeLearner, memory_price, retention_value

# (seconds, returned): returns at 1, 2, 2 and 8 s; one program ended 4 s after its call.
SAMPLES = [(1.0, 1.0), (2.0, 1.0), (8.0, 1.0), (4.0, 0.0), (2.0, 1.0)]


def test_the_table_holds_the_return_chance_and_the_expected_holding_time_at_each_return():
    times = ReturnTimes.build(np.array(SAMPLES))
    assert times.taus.tolist() == [1.0, 2.0, 8.0]
    assert times.returned_by.tolist() == pytest.approx([1 / 5, 3 / 5, 4 / 5])
    # E[min(T, τ)]: at 2 s, (1 + 2 + 2 + 2 + 2) / 5; at 8 s, every sample is below it.
    assert times.held.tolist() == pytest.approx([1.0, 9 / 5, 17 / 5])


@pytest.mark.parametrize("value, price, tau", [
    (1.0, 0.0, 8.0),   # no memory wanted: keep while any return is likely
    (1.0, 0.2, 2.0),   # gains 0, 0.24, 0.12
    (1.0, 0.4, 0.0),   # gains -0.2, -0.12, -0.56
    (1.0, 10.0, 0.0),  # memory is dear: do not retain
    (0.0, 0.0, 0.0),   # nothing to save
])
def test_the_retention_maximises_the_expected_saving_less_the_memory_held(value, price, tau):
    assert ReturnTimes.build(np.array(SAMPLES)).best_retention(value, price) == tau


def test_no_return_seen_means_no_retention_and_no_prefetch_time():
    times = ReturnTimes.build(np.array([(3.0, 0.0), (5.0, 0.0)]))
    assert times.best_retention(10.0, 0.0) == 0.0
    assert times.return_quantile(0.1) is None


def test_the_prefetch_quantile_is_among_the_returns_only():
    times = ReturnTimes.build(np.array(SAMPLES))
    assert [times.return_quantile(q) for q in (0.1, 0.25, 0.5, 0.75, 1.0)] == \
        [1.0, 1.0, 2.0, 2.0, 8.0]


def test_value_and_price_in_call_seconds():
    assert retention_value(0.5, calls_slowed=3) == 2.0  # the call itself and three others
    assert memory_price(64, calls_short_of_blocks=0, blocks_per_call=8) == 0.0
    assert memory_price(64, calls_short_of_blocks=3, blocks_per_call=8) == 3.0  # all admitted
    assert memory_price(16, calls_short_of_blocks=3, blocks_per_call=8) == 2.0  # two fit


def test_the_learner_follows_a_change_of_workload():
    learner = ToolTimeLearner(window=32, min_samples=8)
    for _ in range(32):
        learner.returned("a", 1.0)
    assert learner.times("a").best_retention(1.0, 0.0) == 1.0
    for _ in range(16):
        learner.returned("a", 30.0)
    assert learner.times("a").taus.tolist() == [1.0, 30.0]
    assert learner.times("a").best_retention(1.0, 0.0) == 30.0
    for _ in range(20):  # the old samples left the window (the table lags by an eighth)
        learner.returned("a", 30.0)
    assert learner.times("a").taus.tolist() == [30.0]


def test_a_class_without_enough_samples_uses_every_class():
    learner = ToolTimeLearner(window=100, min_samples=4)
    for _ in range(4):
        learner.returned("a", 5.0)
    assert learner.times("b") is learner.times(None)
    assert learner.times("b").taus.tolist() == [5.0]
    for _ in range(3):
        learner.ended("b", 1.0)
    assert learner.times("b").taus.tolist() == [5.0]  # still the overall table (7 samples)
    learner.ended("b", 1.0)
    assert learner.times("b").best_retention(1.0, 0.0) == 0.0  # b's programs never return
    assert learner.num_samples("b") == 4 and learner.num_samples() == 8
