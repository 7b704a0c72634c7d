"""The adaptive cutoff (scheduler/placement/adaptive_cutoff.py) on scripted outcome sequences.

Program "p" is pinned to replica 0. A home call there (1,000 prompt tokens, 900 cached,
queue 1.0 s) sets its home hit ratio 0.9 and replica 0's queue time 1.0 s. Away calls run on
replica 1 with 1,000 prompt tokens; with 1,000 prefill tokens/s each scores
lost = (900 - cached) / 1000 s * (1 + batch) and gained = 1.0 - queue_seconds, where batch is
the calls running on replica 1 (0 unless a test sets it).
"""

from __future__ import annotations

import pytest

from scheduler.placement import (AdaptiveCutoff, CallOutcome, PlacementRequest, ReplicaLoad,
                                 make_placement)

DOWN = [2048, 1722, 1448, 1218, 1024, 861, 724, 609, 512, 431, 362, 304, 256]
UP = [2048, 2435, 2896, 3444, 4096, 4871, 5793, 6889, 8192, 9742, 11585, 13777, 16384]


def cutoff(**kw) -> AdaptiveCutoff:
    c = AdaptiveCutoff(**{"window": 4, "prefill_tokens_per_second": 1000.0, **kw})
    home(c)
    return c


def home(c: AdaptiveCutoff, cached: int = 900, queue: float = 1.0) -> int:
    return c.observe("p", 0, CallOutcome(replica=0, prompt_tokens=1000, cached_tokens=cached,
                                         queue_seconds=queue))


def away(c: AdaptiveCutoff, cached: int, queue: float, n: int = 1, batch: int = 0
         ) -> list[int]:
    return [c.observe("p", 0, CallOutcome(replica=1, prompt_tokens=1000, cached_tokens=cached,
                                          queue_seconds=queue, batch_calls=batch))
            for _ in range(n)]


def test_down_when_away_calls_miss_much_and_gain_little():
    c = cutoff()
    assert c.cutoff == 2048 and c.home_ratio("p") == 0.9 and c.queue_seconds(0) == 1.0
    # lost 0.8 s, gained 0.1 s per call: one step down per window of 4, never sooner.
    assert away(c, cached=100, queue=0.9, n=12) == [2048] * 3 + [1722] * 4 + [1448] * 4 + [1218]
    assert c.last_decision == "down"
    assert c.last_lost_seconds == pytest.approx(0.8)
    assert c.last_gained_seconds == pytest.approx(0.1)


def test_up_when_away_calls_gain_more_queue_than_they_lose():
    c = cutoff()
    # lost 0.05 s, gained 0.8 s.
    assert away(c, cached=850, queue=0.2, n=8) == [2048] * 3 + [2435] * 4 + [2896]
    assert c.last_decision == "up"


def test_a_miss_costs_the_batch_it_stalls():
    # lost 0.05 s, gained 0.8 s: up when the replica runs nothing else...
    c = cutoff()
    assert away(c, cached=850, queue=0.2, n=4)[-1] == 2435
    # ...but with 39 calls running there the misses stall them, lost 0.05 * 40 = 2.0 s: down.
    c = cutoff()
    assert away(c, cached=850, queue=0.2, n=4, batch=39)[-1] == 1722
    assert c.last_lost_seconds == pytest.approx(2.0)
    assert c.last_gained_seconds == pytest.approx(0.8)
    # With 15 running, lost 0.8 s against gained 0.8 s: it stays.
    c = cutoff()
    assert away(c, cached=850, queue=0.2, n=4, batch=15)[-1] == 2048
    assert c.last_decision == "stay"


@pytest.mark.parametrize("cached, queue", [
    (500, 0.6),    # lost 0.4, gained 0.4
    (500, 0.65),   # lost 0.4, gained 0.35: within the 25% margin
    (900, 1.0),    # nothing lost, nothing gained: under min_seconds
    (898, 0.999),  # 2 ms lost, 1 ms gained: under min_seconds
])
def test_stays_when_balanced(cached, queue):
    c = cutoff()
    assert away(c, cached=cached, queue=queue, n=12) == [2048] * 12
    assert c.last_decision == "stay"


def test_bounds_respected():
    c = cutoff()
    seen = [away(c, cached=0, queue=1.0, n=4)[-1] for _ in range(15)]
    assert seen == DOWN[1:] + [256, 256, 256]
    assert away(c, cached=900, queue=0.0, n=4)[-1] == 304   # k did not run on below 256
    c = cutoff()
    seen = [away(c, cached=900, queue=0.0, n=4)[-1] for _ in range(15)]
    assert seen == UP[1:] + [16384, 16384, 16384]
    assert away(c, cached=0, queue=1.0, n=4)[-1] == 13777
    # Bounds that the steps do not hit exactly clamp, and stepping back leaves the bound.
    c = cutoff(low=1000, high=3000)
    assert [away(c, cached=0, queue=1.0, n=4)[-1] for _ in range(6)] == \
        [1722, 1448, 1218, 1024, 1000, 1000]
    assert away(c, cached=900, queue=0.0, n=4)[-1] == 1024


def test_mixed_sequence_exact():
    c = cutoff()
    assert away(c, cached=100, queue=0.9, n=4)[-1] == 1722               # down
    assert away(c, cached=500, queue=0.6, n=4)[-1] == 1722               # stay
    # Home calls do not count towards the window, but move the estimates: ratio 0.5, and
    # replica 0's queue 1.0 -> 1.0 + 0.25 * (5.0 - 1.0) = 2.0.
    assert home(c, cached=500, queue=5.0) == 1722
    assert c.home_ratio("p") == 0.5 and c.queue_seconds(0) == 2.0
    # Now cached 400 loses 0.1 s and queue 0.5 gains 1.5 s: up.
    assert away(c, cached=400, queue=0.5, n=4) == [1722] * 3 + [2048]
    # One window of 2 bad and 2 good calls averages
    # lost (0.5 + 0.5 + 0 + 0) / 4 = 0.25, gained (0 + 0 + 1.5 + 1.5) / 4 = 0.75: up.
    away(c, cached=0, queue=2.0, n=2)
    assert away(c, cached=500, queue=0.5, n=2)[-1] == 2435


def test_unscored_outcomes():
    c = AdaptiveCutoff(window=1, prefill_tokens_per_second=1000.0)
    # No pin: only the queue time is kept.
    assert c.observe("p", None, CallOutcome(1, 1000, 0, 3.0)) == 2048
    assert c.queue_seconds(1) == 3.0 and c.home_ratio("p") is None
    # Away before any home call: no home ratio, not scored.
    assert c.observe("p", 0, CallOutcome(1, 1000, 0, 0.0)) == 2048
    # A home call, then the program ends: its estimate is gone.
    c.observe("p", 0, CallOutcome(0, 1000, 1000, 1.0))
    c.program_ended("p")
    assert c.observe("p", 0, CallOutcome(1, 1000, 0, 1.0)) == 2048
    # The pinned replica is lost: no queue time to compare with.
    c.observe("p", 0, CallOutcome(0, 1000, 1000, 1.0))
    c.replica_lost(0)
    assert c.observe("p", 0, CallOutcome(1, 1000, 0, 1.0)) == 2048
    assert c.last_decision == ""
    # Both estimates present: scored at once (window 1): lost 1.0 s, gained 0: down.
    c.observe("p", 0, CallOutcome(0, 1000, 1000, 1.0))
    assert c.observe("p", 0, CallOutcome(1, 1000, 0, 1.0)) == 1722


def test_the_cutoff_rule_follows_the_adaptive_cutoff():
    p = make_placement("cutoff", cutoff="auto", window=2, prefill_tokens_per_second=1000.0)

    def ld(a: int, b: int) -> list[ReplicaLoad]:
        return [ReplicaLoad(0, running_tokens=a), ReplicaLoad(1, running_tokens=b)]

    first = PlacementRequest("p", 4000)
    assert p.place(first, ld(0, 10)) == 0                                   # pinned to 0
    p.observe(first, CallOutcome(0, 4000, 3600, 1.0))
    short = PlacementRequest("p", 1900)
    assert p.place(short, ld(500, 0)) == 1                                  # 1900 <= 2048
    for _ in range(2):                                                      # lost 1.71 s each
        p.observe(short, CallOutcome(1, 1900, 0, 0.9))
    assert p.cutoff == 1722
    assert p.place(short, ld(500, 0)) == 0                                  # now long: its pin
    p.replica_lost(0)
    assert p.place(short, ld(500, 0)) == 1                                  # re-pinned to 1
    assert p.adaptive.queue_seconds(0) is None
