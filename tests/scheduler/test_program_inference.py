"""Programs inferred from conversations (scheduler.program_inference): a request that
extends an earlier one joins its program, a different conversation does not, forks join
the same program, the longest earlier request wins, entries end by TTL from last use and
by the per-tenant and total caps (least recently used first), tenants never meet."""

from __future__ import annotations

import pytest

from scheduler.program_inference import ProgramInference, chain_digests

SYSTEM, ASK, REPLY, TOOL, OTHER = b"system", b"ask", b"reply", b"tool result", b"other ask"


def test_a_request_extending_an_earlier_one_joins_its_program():
    index = ProgramInference(ttl=60)
    assert index.join("t", [SYSTEM, ASK], now=0) is None
    index.record("t", [SYSTEM, ASK], "p1", now=0)
    assert index.join("t", [SYSTEM, ASK, REPLY, TOOL], now=1) == "p1"


def test_equal_items_and_a_different_conversation_do_not_join():
    index = ProgramInference(ttl=60)
    index.record("t", [SYSTEM, ASK], "p1", now=0)
    assert index.join("t", [SYSTEM, ASK], now=1) is None  # not a proper prefix
    assert index.join("t", [SYSTEM, OTHER, REPLY], now=1) is None
    assert index.join("t", [SYSTEM], now=1) is None  # shorter: it extends nothing
    assert index.join("t", [ASK, SYSTEM, REPLY], now=1) is None  # order matters


def test_forks_of_one_conversation_join_the_same_program():
    index = ProgramInference(ttl=60)
    index.record("t", [SYSTEM, ASK], "p1", now=0)
    branches = [[SYSTEM, ASK, b"reply %d" % i, b"observation %d" % i] for i in range(3)]
    assert [index.join("t", b, now=1) for b in branches] == ["p1", "p1", "p1"]
    for branch in branches:
        index.record("t", branch, "p1", now=1)
    assert index.join("t", branches[1] + [b"next", b"step"], now=2) == "p1"


def test_the_longest_earlier_request_wins_and_equal_items_take_the_last_recorded():
    index = ProgramInference(ttl=60)
    index.record("t", [SYSTEM, ASK, REPLY, TOOL], "long", now=0)
    index.record("t", [SYSTEM, ASK], "short", now=1)
    assert index.join("t", [SYSTEM, ASK, REPLY, TOOL, REPLY], now=2) == "long"
    assert index.join("t", [SYSTEM, ASK, OTHER], now=2) == "short"
    index.record("t", [SYSTEM, ASK], "again", now=3)
    assert index.join("t", [SYSTEM, ASK, OTHER], now=4) == "again"
    assert len(index) == 2


def test_an_entry_ends_ttl_after_its_last_use():
    index = ProgramInference(ttl=10)
    index.record("t", [SYSTEM, ASK], "p1", now=0)
    assert index.join("t", [SYSTEM, ASK, REPLY], now=9.5) == "p1"  # used: lives to 19.5
    assert index.join("t", [SYSTEM, ASK, TOOL], now=19.4) == "p1"  # lives to 29.4
    assert index.join("t", [SYSTEM, ASK, TOOL], now=29.4) is None
    assert len(index) == 0


def test_the_per_tenant_cap_evicts_that_tenants_least_recently_used_entry():
    index = ProgramInference(ttl=60, max_per_tenant=2)
    index.record("t", [b"a"], "pa", now=0)
    index.record("t", [b"b"], "pb", now=1)
    index.record("u", [b"a"], "ua", now=2)
    assert index.join("t", [b"a", REPLY], now=3) == "pa"  # "a" is now used after "b"
    index.record("t", [b"c"], "pc", now=4)  # evicts "b", t's least recently used
    assert [index.join("t", [k, REPLY], now=5) for k in (b"a", b"b", b"c")] == [
        "pa", None, "pc"]
    assert index.join("u", [b"a", REPLY], now=5) == "ua"  # u's entries are not t's to evict
    assert len(index) == 3


def test_the_total_cap_evicts_the_least_recently_used_entry_of_any_tenant():
    index = ProgramInference(ttl=60, max_entries=2)
    index.record("t", [b"a"], "pa", now=0)
    index.record("u", [b"b"], "pb", now=1)
    index.record("v", [b"c"], "pc", now=2)
    assert (index.join("t", [b"a", REPLY], now=3), index.join("u", [b"b", REPLY], now=3),
            index.join("v", [b"c", REPLY], now=3)) == (None, "pb", "pc")
    assert len(index) == 2


def test_another_tenant_never_joins():
    index = ProgramInference(ttl=60)
    index.record("t", [SYSTEM, ASK], "p1", now=0)
    assert index.join("u", [SYSTEM, ASK, REPLY], now=1) is None
    assert index.join(None, [SYSTEM, ASK, REPLY], now=1) is None
    index.record(None, [SYSTEM, ASK], "anonymous", now=1)
    assert index.join(None, [SYSTEM, ASK, REPLY], now=2) == "anonymous"
    assert index.join("t", [SYSTEM, ASK, REPLY], now=2) == "p1"


def test_items_are_chained_so_a_boundary_shift_is_another_conversation():
    assert chain_digests([b"ab", b"c"])[0] != chain_digests([b"a", b"bc"])[0]
    assert chain_digests([b"ab", b"c"])[1] != chain_digests([b"a", b"bc"])[1]
    assert len(set(chain_digests([b"x"] * 4))) == 4


def test_bad_bounds_and_empty_items_are_refused():
    for kwargs in ({"ttl": 0}, {"ttl": 1, "max_per_tenant": 0},
                   {"ttl": 1, "max_entries": 0}):
        with pytest.raises(ValueError):
            ProgramInference(**kwargs)
    with pytest.raises(ValueError, match="items"):
        ProgramInference(ttl=1).record("t", [], "p", now=0)
    assert ProgramInference(ttl=1).join("t", [], now=0) is None
