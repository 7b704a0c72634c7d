"""Anti-gaming: a client that opens a fresh program for every call does not beat an honest
program of the same work, because each new program of a tenant starts from the tenant's
recent service."""

from __future__ import annotations

from harness import Sim


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
