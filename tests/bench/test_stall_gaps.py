"""bench.studies.hardening.stall_gaps: the gaps of one call's deltas in a window, and the 3x
verdict."""

from __future__ import annotations

import pytest

from bench.studies.hardening.stall_gaps import gap_stats, gap_verdict, gaps_in


def test_gaps_are_within_one_call_and_belong_to_the_window_of_their_later_delta():
    arrivals = [(0.0, 1, 1), (0.5, 1, 1), (1.0, 1, 1), (3.0, 1, 2), (3.25, 2, 2), (9.0, 1, 2)]
    # 0.5 -> 1.0 ends in the window; 1.0 -> 3.0 crosses calls; 3.25 -> 9.0 ends past it.
    assert gaps_in(arrivals, 0.75, 5.0) == [0.5, 0.25]


def test_stats_and_verdict():
    stats = gap_stats([0.01] * 99 + [0.05])
    assert stats == {"victim_gap_p99_ms": pytest.approx(10.4), "victim_gap_max_ms": 50.0}
    assert gap_verdict(stats, quiet_p99_ms=20.0) is True   # 50 <= 3 x 20
    assert gap_verdict(stats, quiet_p99_ms=16.0) is False  # 50 > 48
    assert gap_verdict(gap_stats([]), 20.0) is None and gap_verdict(stats, None) is None
