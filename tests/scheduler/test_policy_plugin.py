"""A policy is one Policy subclass: this one lives only in this file and is handed to the
scheduler, the engine config and the simulator as a class, without registering it."""

from __future__ import annotations

import pytest

from bench.sim.simulate import simulate
from bench.sim.trace import Trace, TraceCall, TraceProgram
from engine.config import EngineConfig
from harness import Sim
from scheduler.policies import POLICIES, Policy, make_policy, policy_name
from scheduler.policies.fcfs import FCFSPolicy
from scheduler.process_table import CallRecord, ProgramRecord


class NewestFirstPolicy(Policy):
    """One queue, the most recent arrival first (LIFO; a toy: old calls may starve)."""

    name = "newest-first"

    def num_levels(self, configured: int) -> int:
        return 1

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        return (-seq,)


def run_one_at_a_time(policy) -> tuple[list[str], list[str]]:
    """c0, c1, c2 arrive at t=0 and c3 at t=1 (each its own program) with one seat: the
    completion order, and the call of the first plan."""
    sim = Sim(policy, num_blocks=64, block_size=4, max_num_seqs=1)
    for i in range(3):
        sim.start(f"p{i}")
        sim.call(f"p{i}", f"c{i}", prompt_len=6, output_len=3)
    first = sim.step()
    sim.start("p3")
    sim.call("p3", "c3", prompt_len=6, output_len=3)
    sim.run()
    sim.scheduler.check_integrity()
    assert sim.kv.num_free_blocks == sim.kv.pool.num_usable
    return sim.completed, [c.call.call_id for c in first.chunks]


def test_a_policy_class_plugs_into_the_scheduler():
    assert run_one_at_a_time(NewestFirstPolicy) == (["c2", "c3", "c1", "c0"], ["c2"])
    assert run_one_at_a_time("fcfs") == (["c0", "c1", "c2", "c3"], ["c0"])


def test_make_policy_and_the_engine_config_take_the_class_unregistered():
    policy = make_policy(NewestFirstPolicy)
    assert type(policy) is NewestFirstPolicy and policy_name(NewestFirstPolicy) == "newest-first"
    assert "newest-first" not in POLICIES
    with pytest.raises(ValueError, match="policy must be one of"):
        make_policy("newest-first")
    assert EngineConfig(policy=NewestFirstPolicy).policy is NewestFirstPolicy
    assert type(make_policy(FCFSPolicy)) is FCFSPolicy

    class Nameless(Policy):
        pass

    with pytest.raises(ValueError, match="Nameless has no name"):
        EngineConfig(policy=Nameless)


def three_programs() -> Trace:
    """Three one-call programs arriving together."""
    return Trace(tuple(
        TraceProgram(f"p{i}", 0.0, (TraceCall("c", prompt_len=10, output_len=3),), "test")
        for i in range(3)))


def test_the_simulator_runs_a_policy_class_given_as_an_engine_override():
    lifo = simulate(three_programs(), "atlas",
                    engine_overrides={"policy": NewestFirstPolicy, "max_num_seqs": 1})
    fcfs = simulate(three_programs(), "atlas", engine_overrides={"policy": "fcfs",
                                                                  "max_num_seqs": 1})
    assert lifo.finish_order == ["p2", "p1", "p0"]
    assert fcfs.finish_order == ["p0", "p1", "p2"]
    assert lifo.num_preemptions == fcfs.num_preemptions == 0
