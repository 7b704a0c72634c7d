"""Inter-token gaps of a run, per call, counted in log-spaced bins: latency as a stream sees it.

A call's inter-token gap is the time between two consecutive tokens of it coming back (the
wait for its first token is its TTFT, not a gap). A call preempted, swapped out or kept
waiting mid-stream shows as one long gap. A long run returns tens of millions of tokens, so
instead of every gap each call keeps a count per bin: bin b holds the gaps in
[RATIO**b, RATIO**(b + 1)) seconds. A percentile is read as the upper edge of the bin that
holds it (nearest rank): never below the exact value (but for rounding), at most 1%
(RATIO - 1) above it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

RATIO = 1.01
_LOG_RATIO = math.log(RATIO)
_SMALLEST = 1e-9  # seconds: a gap of 0 (not made by the simulator) counts as this


@dataclass
class TokenGaps:
    """Per call: its gaps so far in bins, and when its last token came back (while it
    runs). Equal when both are."""

    bins: dict[str, dict[int, int]] = field(default_factory=dict)  # call -> bin -> gaps
    last: dict[str, float] = field(default_factory=dict)  # live call -> its last token's time

    def tokens(self, call_ids: Iterable[str], now: float) -> list[str]:
        """Record that a token of each of `call_ids` came back at `now` (one step's; times
        never go back); returns those for which it is the first token (no gap yet), in
        order."""
        last_of, bins, firsts = self.last, self.bins, []
        binned_last, b = None, 0  # calls that ran in the same step share their gap's bin
        for call_id in call_ids:
            last = last_of.get(call_id)
            last_of[call_id] = now
            if last is None:
                firsts.append(call_id)
                continue
            if last != binned_last:
                binned_last = last
                b = math.floor(math.log(max(now - last, _SMALLEST)) / _LOG_RATIO)
            counts = bins.get(call_id)
            if counts is None:
                counts = bins[call_id] = {}
            counts[b] = counts.get(b, 0) + 1
        return firsts

    def finished(self, call_id: str) -> None:
        """The call is over: forget when its last token came (its bins stay)."""
        self.last.pop(call_id, None)

    def percentile(self, q: float, calls: Iterable[str] | None = None) -> float:
        """The q-th percentile (0..100, nearest rank) of the gaps of `calls` (default: every
        call), as its bin's upper edge; 0.0 when they have no gap."""
        if not 0 <= q <= 100:
            raise ValueError(f"q must be in [0, 100], got {q}")
        merged: dict[int, int] = {}
        for call_id in (self.bins if calls is None else calls):
            for b, n in self.bins.get(call_id, {}).items():
                merged[b] = merged.get(b, 0) + n
        total = sum(merged.values())
        if not total:
            return 0.0
        rank = max(1, math.ceil(q / 100 * total))
        ordered = sorted(merged)
        cumulative = list(itertools.accumulate(merged[b] for b in ordered))
        return RATIO ** (ordered[bisect.bisect_left(cumulative, rank)] + 1)
