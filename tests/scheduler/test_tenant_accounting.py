"""Anti-gaming: a client that opens a fresh program for every call, never ends its programs,
or spreads its calls over many programs does not beat an honest program of the same work,
because a program's floor is the rest of its tenant's service (its ended programs' decayed
and its other live programs' own service). Also: the tenant table is pruned and bounded, and
active programs are capped in all and per tenant."""

from __future__ import annotations

import pytest
from harness import Sim

from scheduler.config import SchedulerConfig
from scheduler.process_table import PRUNE_HALFLIVES, ProgramLimitError


def race(tenant_halflife: float | None) -> tuple[float, float]:
    """Honest tenant: one program of 6 sequential calls. Gamer: the same 6 calls, each in a
    fresh program that it ends afterwards. Returns when each finished its last call.
    Preemption swaps, so neither side pays recompute (which would count as its service)."""
    sim = Sim("plas", max_num_seqs=1, num_queues=6, quantum_base=8, starvation_beta=None,
              tenant_halflife=tenant_halflife, preemption_mode="swap", num_host_blocks=64)
    sim.start("honest", tenant="honest")
    done = {"honest": 0, "gamer": 0}
    finished_at = {}
    current = {}

    def issue(who: str) -> None:
        if who == "honest":
            program = "honest"
        else:
            program = f"gamer-{done['gamer']}"
            sim.start(program, tenant="gamer")
        current[who] = (program, f"{who}-{done[who]}")
        sim.call(program, current[who][1], prompt_len=8, output_len=8)

    issue("honest")
    issue("gamer")
    while len(finished_at) < 2:
        sim.step()
        for who, (program, call_id) in list(current.items()):
            if call_id in sim.completed:
                done[who] += 1
                del current[who]
                if who == "gamer":
                    sim.scheduler.end_program(program, sim.now)
                if done[who] == 6:
                    finished_at[who] = sim.now
                else:
                    issue(who)
    sim.scheduler.check_integrity()
    return finished_at["honest"], finished_at["gamer"]


CALL_STEPS = 8  # one call alone: a prefill step and 7 decode steps


def test_a_fresh_program_per_call_does_not_beat_an_honest_program():
    honest, gamer = race(tenant_halflife=300.0)
    # Same queues call for call: they alternate, so they end at most one call apart.
    assert abs(gamer - honest) <= CALL_STEPS


def test_without_tenant_accounting_the_gamer_wins():
    honest, gamer = race(tenant_halflife=None)
    assert gamer < honest - 4 * CALL_STEPS


def test_a_new_program_starts_from_its_tenants_decayed_recent_service():
    sim = Sim("plas", tenant_halflife=10.0)
    sim.start("a", tenant="t")
    sim.call("a", "c", prompt_len=8, output_len=8)
    sim.run()
    sim.scheduler.end_program("a", sim.now)
    ended = sim.now
    while sim.now < ended + 10:
        sim.step()
    sim.start("b", tenant="t")
    assert sim.scheduler.table.get("b").service == 15 / 2  # one half-life later
    sim.start("c", tenant="other")
    assert sim.scheduler.table.get("c").service == 0


# ----- the floor counts live programs: the three gaming routes ----------------------------
CALL = 15  # the service of one call below: 8 prompt tokens and 7 decoded (token mode)
NO_DECAY = 1e12  # a tenant half-life that no test here comes near


def one_call(sim: Sim, program: str, call_id: str) -> float:
    """Run one call of `program` alone to its end; returns the value it started from."""
    sim.call(program, call_id, prompt_len=8, output_len=8)
    start = sim.scheduler.records[call_id].start_value
    sim.run_until(call_id)
    return start


def honest(calls: int, policy: str = "plas", **config) -> list[float]:
    """One program, `calls` sequential calls: the value each started from."""
    sim = Sim(policy, **config)
    sim.start("h", tenant="honest")
    return [one_call(sim, "h", f"h{i}") for i in range(calls)]


def gamer(route: str, calls: int, policy: str = "plas", **config) -> tuple[Sim, list[float]]:
    """The same calls by a gaming tenant: `fresh` ends a fresh program after each call,
    `never_end` opens a fresh one per call and never ends any, `in_turn` opens 3 programs at
    once and uses them in turn."""
    sim = Sim(policy, **config)
    starts = []
    if route == "in_turn":
        for k in range(3):
            sim.start(f"g{k}", tenant="gamer")
    for i in range(calls):
        program = f"g{i % 3}" if route == "in_turn" else f"g{i}"
        if route != "in_turn":
            sim.start(program, tenant="gamer")
        starts.append(one_call(sim, program, f"c{i}"))
        if route == "fresh":
            sim.scheduler.end_program(program, sim.now)
    sim.scheduler.check_integrity()
    return sim, starts


@pytest.mark.parametrize("policy", ["plas", "atlas"])
@pytest.mark.parametrize("route", ["fresh", "never_end", "in_turn"])
def test_no_route_starts_a_call_lower_than_one_honest_program(route, policy):
    expected = [CALL * i for i in range(6)]
    assert honest(6, policy, tenant_halflife=NO_DECAY) == expected
    _, starts = gamer(route, 6, policy, tenant_halflife=NO_DECAY)
    assert starts == pytest.approx(expected, rel=1e-9)


def test_without_tenant_accounting_every_route_starts_from_zero():
    for route in ("fresh", "never_end", "in_turn"):
        _, starts = gamer(route, 6, tenant_halflife=None)
        assert starts == ([0.0] * 6 if route != "in_turn" else [0, 0, 0, 15, 15, 15])


def test_only_ended_work_decays():
    """With the default half-life, live programs' service never decays: never ending them
    gains nothing at all; ending them lets the ended part decay (as for any tenant that
    ends its programs), by at most the decay over the time since."""
    halflife = SchedulerConfig().tenant_halflife
    reference = honest(6, tenant_halflife=halflife)
    for route in ("never_end", "in_turn"):
        assert gamer(route, 6, tenant_halflife=halflife)[1] == reference
    sim, starts = gamer("fresh", 6, tenant_halflife=halflife)
    for ours, theirs in zip(starts, reference):
        assert theirs * 0.5 ** (sim.now / halflife) <= ours <= theirs


def test_many_programs_at_once_start_from_their_tenants_work():
    """Three programs' calls at once start at 0, as three calls of one program would; the
    next wave starts from all three calls' service (one PLAS program: the same)."""
    sim = Sim("plas", tenant_halflife=NO_DECAY)
    for k in range(3):
        sim.start(f"g{k}", tenant="gamer")
    for wave in range(2):
        for k in range(3):
            sim.call(f"g{k}", f"w{wave}-{k}", prompt_len=8, output_len=8)
            assert sim.scheduler.records[f"w{wave}-{k}"].start_value == \
                pytest.approx(3 * CALL * wave, rel=1e-9)
        sim.run()
    sim.scheduler.check_integrity()


def test_only_own_service_is_credited():
    sim, _ = gamer("in_turn", 4, tenant_halflife=NO_DECAY)  # g0 twice, g1 and g2 once
    table = sim.scheduler.table
    own = [table.get(f"g{k}").own_service for k in range(3)]
    assert own == [2 * CALL, CALL, CALL]
    assert table.get("g0").service == pytest.approx(4 * CALL, rel=1e-9)  # its last call's
    for k in range(3):
        sim.scheduler.end_program(f"g{k}", sim.now)
    assert table.tenant_service("gamer", sim.now) == pytest.approx(4 * CALL, rel=1e-9)


def test_a_raised_floor_keeps_an_atlas_critical_path():
    """ATLAS: a call that started before its program's floor was raised (by another program
    of the tenant) still extends the program's own critical path by its whole service."""
    sim = Sim("atlas", tenant_halflife=NO_DECAY)
    sim.start("A", tenant="t")
    sim.start("B", tenant="t")
    sim.call("A", "long", prompt_len=8, output_len=12)  # service 8 + 11 = 19
    sim.call("B", "short", prompt_len=4, output_len=2)  # service 4 + 1 = 5
    sim.run_until("short")
    sim.call("A", "next", prompt_len=4, output_len=2)  # raises A's floor to B's 5
    table = sim.scheduler.table
    assert table.get("A").floor == pytest.approx(5.0)
    assert sim.scheduler.records["long"].start_value == pytest.approx(5.0)
    sim.run()
    assert table.get("A").own_service == pytest.approx(19.0)
    sim.scheduler.check_integrity()


def test_service_half_life_counts_the_tenants_idle_time():
    """Programs used in turn back to back: each is idle while the others run, but its tenant
    is not, so nothing decays (one program used back to back: the same); once the tenant is
    idle for a half-life, the program's own service halves."""
    config = dict(tenant_halflife=NO_DECAY, program_service_halflife=10.0)
    reference = honest(6, **config)
    assert reference == [CALL * i for i in range(6)]
    sim, starts = gamer("in_turn", 6, **config)
    assert starts == pytest.approx(reference, rel=1e-9)
    table = sim.scheduler.table
    idle_from = sim.now
    while sim.now < idle_from + 10:
        sim.step()
    floor, own = table.get("g0").floor, table.get("g0").own_service
    assert (floor, own) == (pytest.approx(2 * CALL), 2 * CALL)
    start = one_call(sim, "g0", "after")
    assert start == pytest.approx(floor + own / 2 + 2 * CALL)  # floor raised to g1 + g2
    sim.scheduler.check_integrity()


# ----- the tenant table is pruned and bounded ----------------------------------------------
def used_and_ended(sim: Sim, tenant: str) -> None:
    sim.start(tenant, tenant=tenant)
    one_call(sim, tenant, f"{tenant}-call")
    sim.scheduler.end_program(tenant, sim.now)


def test_a_decayed_tenant_record_is_pruned():
    sim = Sim("plas", tenant_halflife=1.0)
    table = sim.scheduler.table
    used_and_ended(sim, "t")
    ended = sim.now
    assert table.num_tenant_records() == 1
    while sim.now < ended + PRUNE_HALFLIVES - 1:
        sim.step()
    assert table.num_tenant_records() == 1  # < 30 half-lives: still there
    while sim.now <= ended + PRUNE_HALFLIVES:
        sim.step()  # each round prunes, with no new tenant arriving
    assert table.num_tenant_records() == 0
    assert table.tenant_service("t", sim.now) == 0.0


def test_the_tenant_table_never_exceeds_max_tenants():
    sim = Sim("plas", tenant_halflife=NO_DECAY, max_tenants=3)
    table = sim.scheduler.table
    for i in range(10):
        used_and_ended(sim, f"t{i}")
        assert table.num_tenant_records() <= 3
    assert [table.tenant_service(f"t{i}", sim.now) > 0 for i in range(10)] == \
        [False] * 7 + [True] * 3  # the least recently credited went first
    sim.scheduler.check_integrity()


def test_a_program_that_did_nothing_leaves_no_tenant_record():
    sim = Sim("plas")
    for i in range(5):
        sim.start(f"p{i}", tenant=f"t{i}")
        sim.scheduler.end_program(f"p{i}", sim.now)
    assert sim.scheduler.table.num_tenant_records() == 0


# ----- caps on active programs ------------------------------------------------------------
def test_active_programs_are_capped_per_tenant_and_in_all():
    sim = Sim("plas", max_programs=5, max_programs_per_tenant=2)
    start = sim.scheduler.start_program
    start(0.0, "a1", "team-a")
    start(0.0, "a2", "team-a")
    for i in range(3):  # one-call programs are neither counted nor refused
        start(0.0, f"one-call-{i}", "team-a", ephemeral=True)
    with pytest.raises(ProgramLimitError, match="^max_programs_per_tenant: 2 programs of "
                                                "tenant 'team-a' are active, the limit is 2$"):
        start(0.0, "a3", "team-a")
    start(0.0, "n1")
    start(0.0, "n2")
    with pytest.raises(ProgramLimitError, match="2 programs without a tenant are active"):
        start(0.0, "n3")  # programs without a tenant count as one tenant
    start(0.0, "b1", "team-b")
    with pytest.raises(ProgramLimitError, match="^max_programs: 5 programs are active, "
                                                "the limit is 5$"):
        start(0.0, "b2", "team-b")
    assert not issubclass(ProgramLimitError, ValueError)
    assert sim.scheduler.table.is_recently_ended("a3") is False  # a refused id is not taken
    sim.scheduler.end_program("a1", 0.0)
    start(0.0, "a3", "team-a")  # room again
    assert len(sim.scheduler.table) == 5 + 3  # the three one-call programs besides
    sim.scheduler.check_integrity()


@pytest.mark.parametrize("name", ["max_programs", "max_programs_per_tenant", "max_tenants"])
def test_the_bounds_must_be_positive(name):
    with pytest.raises(ValueError, match=name):
        SchedulerConfig(**{name: 0})
