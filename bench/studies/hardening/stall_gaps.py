"""A victim's inter-token gaps inside a measured window, and the issue's verdict on them.

A gap is the time between two consecutive deltas of one call (a delta usually carries one
token); the wait and prefill before a call's first delta are not a gap. A gap belongs to the
window its later delta arrives in. The verdict (`gap_ok`): a phase's largest gap is at most
GAP_BOUND times the P99 gap of the quiet phase ("a flood of refused messages does not
stretch other streams' inter-token gaps past 3x the quiet P99"). Phases whose attack calls
are served share the batch with the victim, so their gaps stretch by that share too.
"""

from __future__ import annotations

from typing import Any, Sequence

from bench.sim.metrics import percentile

GAP_BOUND = 3.0


def gaps_in(arrivals: Sequence[tuple[float, int, int]], t0: float, t1: float) -> list[float]:
    """Seconds between consecutive deltas of one call (`arrivals`: (time, tokens, call) in
    arrival order), for each delta arriving in [t0, t1)."""
    return [t - prev_t for (prev_t, _, prev_call), (t, _, call) in zip(arrivals, arrivals[1:])
            if call == prev_call and t0 <= t < t1]


def gap_stats(gaps: Sequence[float]) -> dict[str, float | None]:
    """`victim_gap_p99_ms` and `victim_gap_max_ms` (None when the window holds no gap)."""
    if not gaps:
        return {"victim_gap_p99_ms": None, "victim_gap_max_ms": None}
    return {"victim_gap_p99_ms": round(percentile(gaps, 99) * 1000, 2),
            "victim_gap_max_ms": round(max(gaps) * 1000, 2)}


def gap_verdict(phase: dict[str, Any], quiet_p99_ms: float | None) -> bool | None:
    """Whether `phase`'s largest gap is within GAP_BOUND x the quiet P99 (None: no quiet
    phase or no gaps to judge)."""
    largest = phase.get("victim_gap_max_ms")
    if quiet_p99_ms is None or largest is None:
        return None
    return largest <= GAP_BOUND * quiet_p99_ms
