"""Program lifecycle: end with active calls, expiry, aborts, unknown ids, ending twice."""

from __future__ import annotations

import pytest

from harness import Sim
from scheduler.process_table import ProgramState, UnknownProgramError


def test_ending_a_program_with_active_calls_frees_everything():
    sim = Sim("atlas", num_blocks=50, num_host_blocks=0)
    sim.start("p")
    for i in range(3):
        sim.call("p", f"c{i}", prompt_len=10, output_len=20)
    sim.step()
    sim.step()
    assert sim.kv.num_free_blocks < sim.kv.pool.num_usable
    record, aborted = sim.scheduler.end_program("p", sim.now, failed=True)
    assert sorted(c.call_id for c in aborted) == ["c0", "c1", "c2"]
    assert record.state is ProgramState.FAILED and record.active_calls == {}
    assert sim.kv.num_free_blocks == sim.kv.pool.num_usable
    assert sim.scheduler.num_unfinished == 0 and len(sim.scheduler.table) == 0
    sim.scheduler.check_integrity()


def test_an_idle_program_expires_after_the_ttl_and_a_busy_one_does_not():
    sim = Sim("plas", program_ttl=10.0)
    sim.start("idle")
    sim.start("busy")
    sim.call("busy", "long", prompt_len=4, output_len=30)
    for _ in range(9):
        sim.step()
    assert "idle" in sim.scheduler.table
    sim.step()  # now = 10: "idle" was started at 0
    sim.step()
    assert "idle" not in sim.scheduler.table and "busy" in sim.scheduler.table
    with pytest.raises(UnknownProgramError):
        sim.call("idle", "late")
    sim.run()
    finished_at = sim.now
    while sim.now < finished_at + 10:
        sim.step()
    sim.step()
    assert len(sim.scheduler.table) == 0
    sim.scheduler.check_integrity()


def test_an_aborted_call_frees_its_blocks_and_leaves_its_program():
    sim = Sim("plas", num_blocks=50)
    sim.start("p")
    call = sim.call("p", "c", prompt_len=10, output_len=20)
    sim.step()
    sim.scheduler.finish(call, sim.now)
    assert sim.kv.num_free_blocks == sim.kv.pool.num_usable
    assert sim.scheduler.table.get("p").active_calls == {}
    sim.scheduler.check_integrity()


def test_unknown_program_ids_raise_a_named_key_error():
    sim = Sim("plas")
    with pytest.raises(KeyError, match="nope"):
        sim.call("nope", "c")
    with pytest.raises(UnknownProgramError):
        sim.scheduler.end_program("nope", sim.now)
    assert sim.scheduler.num_unfinished == 0


def test_ending_a_program_twice_is_harmless():
    sim = Sim("plas")
    sim.start("p")
    sim.call("p", "c")
    sim.run()
    first, _ = sim.scheduler.end_program("p", sim.now)
    again, aborted = sim.scheduler.end_program("p", sim.now)
    assert again is first and aborted == [] and first.state is ProgramState.COMPLETED
    with pytest.raises(UnknownProgramError):
        sim.scheduler.table.get("p")
    sim.scheduler.check_integrity()


def test_process_table_counters():
    sim = Sim("plas")
    sim.start("p")
    sim.call("p", "a", prompt_len=8, output_len=5)
    sim.run()
    for _ in range(3):
        sim.step()
    sim.call("p", "b", prompt_len=6, output_len=2)
    sim.run()
    record = sim.scheduler.table.get("p")
    assert (record.num_calls, record.prompt_tokens, record.generated_tokens) == (2, 14, 7)
    assert record.external_time == 3.0
    assert record.service == (8 + 4) + (6 + 1)


def test_load_counts_running_and_queued_calls_and_their_tokens():
    sim = Sim(max_num_seqs=1)
    sim.start("p")
    sim.call("p", "a", prompt_len=8, output_len=4)
    sim.call("p", "b", prompt_len=12, output_len=4)
    sim.call("p", "c", prompt_len=5, output_len=4)
    sim.step()  # a prefills and samples its first token; b and c wait
    load = sim.scheduler.load()
    assert (load.calls_running, load.calls_waiting, load.calls_swapped) == (1, 2, 0)
    assert (load.running_tokens, load.waiting_tokens) == (9, 17)
    assert sum(load.queue_depths) == 2 and load.programs_active == 1
    sim.run()
    load = sim.scheduler.load()
    assert (load.calls_running, load.calls_waiting, load.waiting_tokens) == (0, 0, 0)
