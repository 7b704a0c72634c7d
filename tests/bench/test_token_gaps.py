"""TokenGaps: inter-token gaps per call, in 1% bins, read as nearest-rank percentiles."""

import math
import random

import pytest

from bench.sim.token_gaps import RATIO, TokenGaps


def exact_nearest_rank(values, q):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def test_a_calls_first_token_is_no_gap_and_later_ones_are():
    gaps = TokenGaps()
    assert gaps.tokens(["P/a"], 1.0) == ["P/a"]
    assert gaps.tokens(["Q/b", "P/a"], 3.0) == ["Q/b"]
    assert gaps.tokens(["P/a"], 3.5) == []
    assert sum(gaps.bins["P/a"].values()) == 2 and "Q/b" not in gaps.bins
    assert gaps.percentile(50) == RATIO ** (math.floor(math.log(0.5) / math.log(RATIO)) + 1)
    assert 2.0 <= gaps.percentile(100) < 2.0 * RATIO


def test_a_finished_call_is_forgotten_but_its_gaps_stay():
    gaps = TokenGaps()
    gaps.tokens(["P/a"], 0.0)
    gaps.tokens(["P/a"], 1.0)
    gaps.finished("P/a")
    assert gaps.tokens(["P/a"], 5.0) == ["P/a"]  # an id used again starts over: no 4 s gap
    assert gaps.percentile(100) == RATIO  # the one gap of 1 s


def test_percentiles_of_chosen_calls_and_without_gaps():
    gaps = TokenGaps()
    gaps.tokens(["A/x", "B/y"], 0.0)
    gaps.tokens(["A/x"], 0.1)
    gaps.tokens(["A/x"], 0.2)
    gaps.tokens(["B/y"], 4.0)
    assert 4.0 <= gaps.percentile(99, ["B/y"]) < 4.0 * RATIO
    assert 0.1 <= gaps.percentile(99, ["A/x"]) < 0.1 * RATIO
    assert gaps.percentile(99, ["C/z"]) == 0.0 and TokenGaps().percentile(50) == 0.0
    with pytest.raises(ValueError, match="q must be in"):
        gaps.percentile(101)


@pytest.mark.parametrize("seed", range(5))
def test_a_percentile_is_never_below_the_exact_one_nor_1_percent_above(seed):
    rng = random.Random(seed)
    gaps, values, now = TokenGaps(), [], 0.0
    gaps.tokens(["P/c"], now)
    for _ in range(2_000):
        before, now = now, now + rng.lognormvariate(-3, 1.5)
        values.append(now - before)
        gaps.tokens(["P/c"], now)
    for q in (1, 50, 90, 99, 100):
        exact = exact_nearest_rank(values, q)
        assert exact * (1 - 1e-12) <= gaps.percentile(q) <= exact * RATIO * (1 + 1e-12)


def test_calls_of_one_step_with_different_last_tokens_get_their_own_gaps():
    gaps = TokenGaps()
    gaps.tokens(["A/x"], 0.0)
    gaps.tokens(["B/y", "C/z"], 1.0)
    gaps.tokens(["B/y", "A/x", "C/z"], 2.0)  # gaps 1, 2, 1: the shared bin is not reused
    assert 2.0 <= gaps.percentile(100, ["A/x"]) < 2.0 * RATIO
    assert gaps.percentile(100, ["B/y", "C/z"]) == RATIO
