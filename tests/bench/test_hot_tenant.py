"""The hot-tenant transform: which programs it takes, the prefix they share, and the CLI run
where a prefix-following placement piles the tenant onto one replica."""

import json

import pytest

from bench import cli
from bench.sim.hot_tenant import HOT_KEY, hot_tenant
from bench.sim.trace import Trace, TraceCall, TraceProgram


def program(i: int, prompts: tuple[int, ...], key: str | None = None) -> TraceProgram:
    calls = tuple(TraceCall(f"c{n}", p, 4) for n, p in enumerate(prompts))
    return TraceProgram(f"p{i}", float(i), calls, "t", key, 64 if key else 0)


TRACE = Trace((program(0, (5000, 9000)), program(1, (900, 2000), "docs"),
               program(2, (3000,)), program(3, (8000, 8100))))


def test_the_tenants_programs_share_one_prefix_capped_at_their_shortest_prompt():
    hot = hot_tenant(TRACE, 1.0, prefix_len=4096)
    assert [(p.prefix_key, p.prefix_len) for p in hot.programs] == \
        [(HOT_KEY, 4096), (HOT_KEY, 900), (HOT_KEY, 3000), (HOT_KEY, 4096)]
    assert [(p.arrival, p.calls) for p in hot.programs] == \
        [(p.arrival, p.calls) for p in TRACE.programs]


def test_a_fraction_takes_the_same_programs_every_time_and_leaves_the_rest():
    trace = Trace(tuple(program(i, (5000,)) for i in range(400)))
    hot = hot_tenant(trace, 0.3, seed=5)
    taken = [p.program_id for p in hot.programs if p.prefix_key == HOT_KEY]
    assert 90 <= len(taken) <= 150
    assert taken == [p.program_id for p in hot_tenant(trace, 0.3, seed=5).programs
                     if p.prefix_key == HOT_KEY]
    assert all(p.prefix_key is None for p in hot.programs if p.program_id not in taken)
    for fraction in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            hot_tenant(trace, fraction)
    with pytest.raises(ValueError, match="prefix_len"):
        hot_tenant(trace, 0.5, prefix_len=0)


def sim_json(capsys, *extra: str) -> dict:
    cli.main(["sim", "--workload", "sharegpt", "--programs", "12", "--rate", "4", "--seed",
              "1", "--replicas", "2", "--kv-events", "--json", *extra])
    return json.loads(capsys.readouterr().out)


def test_prefix_aware_puts_the_hot_tenant_on_one_replica(capsys):
    """Every program shares the tenant's prompt: after the first call, each first call's
    longest hit is on the replica that holds it, so prefix_aware sends every call there
    (without the tenant, programs spread over both)."""
    piled = sim_json(capsys, "--placement", "prefix_aware", "--hot-tenant", "1")
    assert piled["hot_tenant"] == 1.0
    assert sorted(r["calls"] for r in piled["per_replica"])[0] == 0
    control = sim_json(capsys, "--placement", "prefix_aware")
    assert control["hot_tenant"] is None
    assert min(r["calls"] for r in control["per_replica"]) > 0
