"""Intervals over seeds and paired ratios (bench/analysis/seed_stats.py)."""

import math

import pytest

from bench.analysis.seed_stats import Interval, interval, paired_ratio, t975, verdict


def test_t_quantiles():
    assert t975(1) == 12.706
    assert t975(2) == 4.303
    assert t975(30) == 2.042
    assert t975(31) == 1.96
    with pytest.raises(ValueError, match="df"):
        t975(0)


def test_interval_three_seeds():
    got = interval([1.0, 2.0, 3.0])  # mean 2, sd 1, half = 4.303 / sqrt(3)
    half = 4.303 / math.sqrt(3)
    assert (got.mean, got.n) == (2.0, 3)
    assert got.low == pytest.approx(2 - half)
    assert got.high == pytest.approx(2 + half)
    assert got.text(3) == f"2 [{2 - half:.3g}, {2 + half:.3g}]"


def test_interval_one_seed_has_no_width():
    got = interval([0.5])
    assert got == Interval(0.5, 0.5, 0.5, 1)
    assert got.text() == "0.5 (1 seed)"


@pytest.mark.parametrize("values, field", [([], "values"), ([1.0, math.nan], "values")])
def test_interval_rejects(values, field):
    with pytest.raises(ValueError, match=field):
        interval(values)


def test_paired_ratio_removes_what_seeds_share():
    # The seeds differ 10x from each other; ours is 10% above theirs on every one.
    ours, theirs = [1.1, 11.0, 110.0], [1.0, 10.0, 100.0]
    ratio = paired_ratio(ours, theirs)
    assert ratio.mean == pytest.approx(1.1)
    assert ratio.low == pytest.approx(1.1) and ratio.high == pytest.approx(1.1)
    assert verdict(ratio) == "loses"
    assert verdict(paired_ratio(theirs, ours)) == "wins"
    # Two unpaired intervals of the same numbers overlap: no verdict could be read off.
    assert interval(ours).low < interval(theirs).high


def test_verdicts():
    assert verdict(Interval(1.0, 0.9, 1.1, 3)) == "tie"
    assert verdict(Interval(1.2, 1.01, 1.3, 3)) == "loses"
    assert verdict(Interval(0.8, 0.7, 0.99, 3)) == "wins"
    assert verdict(Interval(2.0, 2.0, 2.0, 1)) == "n/a"


@pytest.mark.parametrize("ours, theirs, field", [([1.0], [1.0, 2.0], "ours and theirs"),
                                                  ([1.0], [0.0], "theirs")])
def test_paired_ratio_rejects(ours, theirs, field):
    with pytest.raises(ValueError, match=field):
        paired_ratio(ours, theirs)
