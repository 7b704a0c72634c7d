"""Placement policies: exact decisions on scripted loads, pins, prefix estimates, registry.

Loads are scripted per decision: `loads(a, b, c)` gives replica i `load_tokens` equal to the
i-th argument (None: unhealthy).
"""

from __future__ import annotations

import random

import pytest

from kvcache.cache_events import wire_hash
from kvcache.prefix_hash import hash_block
from scheduler.placement import (DEFAULT_PLACEMENT, PLACEMENTS, AdaptiveCutoff,
                                 CutoffPlacement, LeastLoadedPlacement, PinnedPlacement,
                                 Placement, PlacementRequest, PrefixAwarePlacement,
                                 QueuePricedPlacement, ReplicaLoad, RoundRobinPlacement,
                                 make_placement)


def loads(*tokens: int | None, blocks: int = 100) -> list[ReplicaLoad]:
    return [ReplicaLoad(replica=i, healthy=t is not None, running_tokens=t or 0,
                        kv_blocks_total=blocks) for i, t in enumerate(tokens)]


def call(program: str, prompt: int = 100, hashes: tuple[int, ...] = ()) -> PlacementRequest:
    return PlacementRequest(program_id=program, prompt_tokens=prompt, block_hashes=hashes)


def chain(*blocks: int) -> tuple[int, ...]:
    """Chained hashes of one-token blocks with the given token ids."""
    out, parent = [], None
    for token in blocks:
        parent = hash_block(parent, [token])
        out.append(parent)
    return tuple(out)


def test_load_measure_is_running_plus_waiting_tokens():
    load = ReplicaLoad(replica=0, running_tokens=300, waiting_tokens=45)
    assert load.load_tokens == 345


def test_least_loaded():
    p = LeastLoadedPlacement()
    assert p.place(call("a"), loads(300, 100, 100)) == 1      # tie 1/2: lowest index
    assert p.place(call("a"), loads(300, None, 100)) == 2
    assert p.place(call("b"), loads(0, 5, 5)) == 0
    waiting = [ReplicaLoad(0, running_tokens=10, waiting_tokens=100),
               ReplicaLoad(1, running_tokens=100)]
    assert p.place(call("a"), waiting) == 1


def test_round_robin():
    p = RoundRobinPlacement()
    assert [p.place(call("a"), loads(0, 0, 0)) for _ in range(4)] == [0, 1, 2, 0]
    assert p.place(call("a"), loads(0, None, 0)) == 2          # skips the unhealthy one
    assert p.place(call("a"), loads(0, None, 0)) == 0
    assert p.place(call("a"), loads(None, 0, 0)) == 1
    assert p.place(call("a"), loads(0, 0, 0, 0)) == 2          # a fourth replica joined
    assert p.place(call("a"), loads(0, 0, 0, 0)) == 3
    assert p.place(call("a"), loads(0, 0, 0)) == 0             # and left


def test_pinned_affinity_repin_and_end():
    p = PinnedPlacement()
    assert p.place(call("a"), loads(50, 10, 30)) == 1          # pinned at first call
    assert p.place(call("a"), loads(50, 500, 0)) == 1          # stays, whatever the load
    assert p.place(call("b"), loads(50, 500, 0)) == 2
    # The pinned replica is unhealthy: re-pinned to the least-loaded healthy one, and the
    # pin does not move back when it recovers.
    assert p.place(call("a"), loads(40, None, 30)) == 2
    assert p.place(call("a"), loads(40, 0, 30)) == 2
    # A lost replica: its programs re-pin at their next call, even if it comes back.
    p.replica_lost(2)
    assert p.place(call("b"), loads(20, 10, 0)) == 2            # back, least loaded: fresh pin
    assert p.place(call("a"), loads(20, 10, 30)) == 1
    assert p.place(call("b"), loads(20, 10, 30)) == 2           # b's new pin holds
    p.program_ended("a")
    assert p.pins.get("a") is None
    assert p.place(call("a"), loads(0, 10, 30)) == 0
    assert len(p.pins) == 2


def test_cutoff_rule_scripted():
    p = CutoffPlacement()
    assert p.cutoff == 2048
    script = [  # (program, prompt, loads, expected replica)
        ("a", 4000, loads(100, 50, 80), 1),        # a pinned to 1 (least loaded); long -> pin
        ("b", 500, loads(100, 900, 80), 2),        # b pinned to 2; short -> least loaded (2)
        ("a", 2048, loads(10, 900, 500), 0),       # at the cutoff: short -> least loaded
        ("a", 2049, loads(10, 900, 500), 1),       # above: its pin, however loaded
        ("b", 2047, loads(300, 20, 400), 1),
        ("b", 3000, loads(300, 20, 400), 2),
        ("a", 5000, loads(300, None, 200), 2),     # pin unhealthy: a re-pinned to 2
        ("a", 5000, loads(300, 0, 200), 2),        # stays at 2 after 1 recovers
        ("a", 100, loads(0, 500, 900), 0),
    ]
    assert [p.place(call(prog, n), ld) for prog, n, ld, _ in script] == \
        [want for *_, want in script]
    assert (p.pins.get("a"), p.pins.get("b")) == (2, 2)
    p.replica_lost(2)
    assert p.place(call("b", 3000), loads(300, 0, 0)) == 1     # re-pinned: tie 1/2 -> 1
    assert p.place(call("a", 100), loads(300, 0, 50)) == 1     # short; a re-pinned lazily to 1
    assert p.place(call("a", 4000), loads(0, 500, 100)) == 1   # long: its new pin
    p.program_ended("b")
    assert p.place(call("b", 4000), loads(0, 500, 100)) == 0   # fresh pin


def test_cutoff_rule_other_cutoffs():
    zero = CutoffPlacement(cutoff=0)           # every call is long: pure affinity
    assert zero.place(call("a", 1), loads(5, 0)) == 1
    assert zero.place(call("a", 1), loads(0, 5)) == 1
    big = make_placement("cutoff", cutoff=10_000)
    assert big.place(call("a", 9000), loads(5, 0)) == 1
    assert big.place(call("a", 9000), loads(0, 5)) == 0
    assert big.place(call("a", 10_001), loads(0, 5)) == 1


def test_prefix_aware_longest_hit_then_least_loaded():
    p = PrefixAwarePlacement()
    a = chain(1, 2, 3, 4)
    assert p.place(call("x", hashes=a), loads(30, 10, 20)) == 1          # no hits: least loaded
    assert p.place(call("y", hashes=a[:2]), loads(30, 900, 20)) == 1      # 2-block hit beats load
    b = chain(1, 2, 7, 8, 9)                                             # shares 2 blocks with a
    assert p.place(call("y", hashes=b), loads(30, 900, 20)) == 1
    assert p.place(call("z", hashes=chain(1, 2, 3, 5, 6)), loads(0, 900, 0)) == 1  # 3 blocks
    # Give replica 2 a longer run of b: sent there while 1 is unhealthy.
    assert p.place(call("y", hashes=b + chain(1, 2, 7, 8, 9, 10)[5:]),
                   loads(30, None, 20)) == 2
    assert p.expected_hit(loads(0, 0, 0)[2], chain(1, 2, 7, 8, 9, 10)) == 6
    assert p.expected_hit(loads(0, 0, 0)[1], chain(1, 2, 7, 8, 9, 10)) == 5
    assert p.place(call("y", hashes=chain(1, 2, 7, 8, 9, 10)), loads(0, 0, 900)) == 2
    # Equal hits: the least loaded of the tied replicas, then the lowest index.
    assert p.place(call("w", hashes=chain(1, 2, 3, 4, 11)), loads(0, 0, 0)) == 1  # 4 vs 2
    assert p.place(call("w", hashes=chain(1, 2, 99)), loads(0, 50, 40)) == 2      # 2 vs 2
    assert p.place(call("w", hashes=chain(1, 2, 98)), loads(0, 40, 40)) == 1
    # No hashes at all: least loaded.
    assert p.place(call("v"), loads(7, 5, 6)) == 1


def test_prefix_aware_decays_as_the_cache_turns_over():
    p = PrefixAwarePlacement()
    old = chain(1, 2, 3, 4)
    assert p.place(call("a", hashes=old), loads(0, 10, blocks=8)) == 0
    assert p.place(call("a", hashes=old), loads(50, 10, blocks=8)) == 0   # remembered
    # Three other blocks sent to replica 0: 4 + 3 = 7 fit in its 8; still remembered.
    assert p.place(call("b", hashes=chain(20, 21, 22)), loads(0, 10, blocks=8)) == 0
    assert p.expected_hit(loads(0, blocks=8)[0], old) == 4
    # Two more: 9 blocks for 8 places; the oldest goes, and it is old's tail (sent last
    # block first), so old's run shrinks from the end.
    assert p.place(call("c", hashes=chain(30, 31)), loads(0, 10, blocks=8)) == 0
    assert p.expected_hit(loads(0, blocks=8)[0], old) == 3
    # A replica that has since received a cache's worth of other blocks forgot them all.
    assert p.place(call("d", hashes=chain(*range(40, 48))), loads(0, 10, blocks=8)) == 0
    assert p.expected_hit(loads(0, blocks=8)[0], old) == 0
    assert p.place(call("a", hashes=old), loads(50, 10, blocks=8)) == 1   # least loaded
    # A smaller block count at a later decision trims the record at once.
    assert p.expected_hit(loads(0, 0, blocks=2)[1], old) == 2
    # A budget option overrides the loads' block counts.
    q = make_placement("prefix_aware", blocks_per_replica=3)
    q.place(call("a", hashes=old), loads(0, 10, blocks=100))
    assert q.expected_hit(loads(0, blocks=100)[0], old) == 3


def test_reported_caches_win_over_what_was_sent():
    """With KV events (`ReplicaLoad.cached`), the expected hit is the leading run of a
    call's hashes the replica reports, whatever was sent there; a replica that reports
    nothing is still guessed from what was sent."""
    p = PrefixAwarePlacement()
    a = chain(1, 2, 3, 4)
    assert p.place(call("x", hashes=a), loads(0, 10)) == 0               # sent to 0
    reported = [ReplicaLoad(0, cached=set()), ReplicaLoad(1, cached={wire_hash(h) for h in a})]
    assert [p.expected_hit(load, a) for load in reported] == [0, 4]
    assert p.place(call("y", hashes=a), reported) == 1                  # 1 holds it
    holes = ReplicaLoad(1, cached={wire_hash(a[0]), wire_hash(a[2]), wire_hash(a[3])})
    assert p.expected_hit(holes, a) == 1                                 # a hit stops at a miss
    mixed = [ReplicaLoad(0, kv_blocks_total=100), ReplicaLoad(1, cached=set())]
    assert [p.expected_hit(load, a) for load in mixed] == [4, 0]        # 0 guessed: sent there
    assert p.place(call("z", hashes=a), mixed) == 0


def test_prefix_aware_unhealthy_lost_and_load_gap():
    p = PrefixAwarePlacement()
    a = chain(1, 2, 3)
    assert p.place(call("a", hashes=a), loads(0, 10)) == 0
    assert p.place(call("a", hashes=a), loads(None, 10)) == 1            # best hit unhealthy
    assert p.place(call("a", hashes=chain(1, 2, 3, 4)), loads(0, 10)) == 0  # tie 3/3: load
    p.replica_lost(0)
    assert p.place(call("a", hashes=a), loads(0, 10)) == 1                # 0 forgot everything
    g = make_placement("prefix_aware", max_load_gap=100)
    assert g.place(call("a", hashes=a), loads(0, 50)) == 0
    assert g.place(call("a", hashes=a), loads(100, 0)) == 0               # gap 100: allowed
    assert g.place(call("a", hashes=a), loads(101, 0)) == 1               # too far ahead


@pytest.mark.parametrize("name", sorted(PLACEMENTS))
def test_never_unhealthy_and_none_healthy_is_an_error(name):
    p = make_placement(name)
    rng = random.Random(7)
    programs = [f"p{i}" for i in range(5)]
    for _ in range(300):
        ld = [ReplicaLoad(replica=i, healthy=rng.random() < 0.6,
                          running_tokens=rng.randrange(1000), kv_blocks_total=16)
              for i in range(4)]
        if rng.random() < 0.05:
            p.replica_lost(rng.randrange(4))
        if not any(x.healthy for x in ld):
            with pytest.raises(ValueError, match="no healthy replica"):
                p.place(call(rng.choice(programs)), ld)
            continue
        r = p.place(call(rng.choice(programs), rng.randrange(1, 5000),
                         chain(*rng.sample(range(8), rng.randrange(6)))), ld)
        assert ld[r].healthy
    with pytest.raises(ValueError, match="no healthy replica"):
        p.place(call("a"), loads(None, None))
    with pytest.raises(ValueError, match="no healthy replica"):
        p.place(call("a"), [])


@pytest.mark.parametrize("name", sorted(PLACEMENTS))
def test_deterministic(name):
    def run() -> list[int]:
        p, rng = make_placement(name), random.Random(3)
        return [p.place(call(f"p{rng.randrange(4)}", rng.randrange(4000),
                             chain(*rng.sample(range(6), 3))),
                        loads(*(rng.randrange(3) for _ in range(3))))
                for _ in range(100)]
    assert run() == run()


def test_registry():
    assert set(PLACEMENTS) == {"agentix", "cutoff", "round_robin", "least_loaded", "pinned",
                               "prefix_aware"}
    assert DEFAULT_PLACEMENT == "agentix" and PLACEMENTS["agentix"] is QueuePricedPlacement
    with pytest.raises(TypeError):
        PLACEMENTS["x"] = RoundRobinPlacement           # type: ignore[index]
    for name, cls in PLACEMENTS.items():
        assert cls.name == name and issubclass(cls, Placement)
        assert type(make_placement(name)) is cls
    fixed = make_placement("cutoff", cutoff=1000)
    assert fixed.cutoff == 1000 and fixed.adaptive is None
    auto = make_placement("cutoff", cutoff="auto", window=3, low=512)
    assert isinstance(auto.adaptive, AdaptiveCutoff)
    assert (auto.cutoff, auto.adaptive.window, auto.adaptive.low) == (2048, 3, 512)
    assert make_placement("round_robin", cutoff="auto").name == "round_robin"  # unused there
    assert type(make_placement(PinnedPlacement)) is PinnedPlacement


@pytest.mark.parametrize("args, kwargs, match", [
    (("nope",), {}, "nope"),
    ((42,), {}, "42"),
    (("cutoff",), {"cutoff": "fast"}, "fast"),
    (("cutoff",), {"cutoff": -1}, "-1"),
    (("cutoff",), {"cutoff": True}, "True"),
    (("pinned",), {"cutoff": 2.5}, "2.5"),
    (("cutoff",), {"window": 4}, "window.*cutoff='auto'"),
    (("cutoff",), {"cutoff": "auto", "windw": 4}, "windw"),
    (("cutoff",), {"cutoff": "auto", "window": 0}, "window"),
    (("cutoff",), {"cutoff": "auto", "initial": 100}, "initial"),
    (("cutoff",), {"cutoff": "auto", "margin": "x"}, "placement cutoff"),
    (("cost",), {}, r"one of \['agentix', 'cutoff', .*got 'cost'"),   # the old name
    (("round_robin",), {"blocks_per_replica": 4}, "blocks_per_replica"),
    (("prefix_aware",), {"blocks": 4}, "blocks"),
    (("prefix_aware",), {"blocks_per_replica": 0}, "blocks_per_replica"),
    (("prefix_aware",), {"max_load_gap": -1}, "max_load_gap"),
])
def test_make_placement_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_placement(*args, **kwargs)
