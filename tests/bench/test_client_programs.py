"""Programs of clients that name none, in the simulator (bench.sim.client_programs): on a
trace whose prompts re-send their parents' (conversations, forks, a shared system prompt)
the inferred programs are the trace's own, call for call; a prompt shorter than its
parent's history splits its program; a program ended by its TTL is started afresh; `named`
starts each trace program once, with its first call; `none` gives every call a one-call
program; the oracle needs explicit ids."""

from __future__ import annotations

import pytest

from bench.sim.client_programs import ClientPrograms
from bench.sim.simulate import simulate
from bench.sim.trace import Trace, TraceCall, TraceProgram
from engine.errors import UnknownProgramError


def program(program_id: str, arrival: float, *calls: TraceCall, prefix: int = 0
            ) -> TraceProgram:
    return TraceProgram(program_id, arrival, calls, "test", "docs" if prefix else None, prefix)


def call(call_id: str, prompt_len: int, output_len: int = 5, *parents: str) -> TraceCall:
    return TraceCall(call_id, prompt_len, output_len, parents)


CONVERSATIONS = Trace((
    program("chat", 0.0, call("c0", 20), call("c1", 40, 5, "c0"), call("c2", 70, 5, "c1")),
    # a tree: two forks of the root, one continued; a call with two parents follows its first
    program("tree", 0.1, call("root", 20), call("a", 30, 5, "root"), call("b", 32, 5, "root"),
            call("a1", 50, 5, "a"), call("join", 80, 5, "a1", "b")),
    program("docs-1", 0.2, call("c0", 24), call("c1", 40, 5, "c0"), prefix=16),
    program("docs-2", 0.3, call("c0", 24), call("c1", 40, 5, "c0"), prefix=16),
))


def test_inferred_programs_are_the_trace_programs_when_prompts_extend_their_parents():
    inferred = simulate(CONVERSATIONS, "gittins", program_ids="inferred")
    assert inferred.extra["inferred_programs"] == dict(calls=12, correct=12, split=0, false_join=0,
                                                 programs=4)
    explicit = simulate(CONVERSATIONS, "gittins")
    assert "inferred_programs" not in explicit.extra
    assert sorted(p.program_id for p in inferred.programs) == sorted(
        p.program_id for p in explicit.programs)


def test_a_prompt_shorter_than_its_parents_history_splits_its_program():
    # c1 re-sends only part of c0's prompt: a program of its own, which c2 then extends.
    trace = Trace((program("p", 0.0, call("c0", 40), call("c1", 30, 3, "c0"),
                           call("c2", 60, 5, "c1")),))
    assert simulate(trace, "gittins", program_ids="inferred").extra["inferred_programs"] == dict(
        calls=3, correct=1, split=2, false_join=0, programs=2)


class FakeEngine:
    """Starts programs and says which are active; `ended` ones are gone."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: set[str] = set()

    def start_program(self, program_id: str) -> str:
        self.started.append(program_id)
        return program_id

    def get_program(self, program_id: str) -> None:
        if program_id in self.ended:
            raise UnknownProgramError(program_id)


def test_a_program_ended_by_its_ttl_is_started_afresh_and_entries_expire():
    trace = CONVERSATIONS.programs[0]
    prompt = list(range(100, 170))
    client, engine = ClientPrograms("inferred", ttl=10.0), FakeEngine()
    first = client.program_of(engine, 0, trace, trace.calls[0], prompt[:20], now=0.0)
    engine.ended.add(first)
    second = client.program_of(engine, 0, trace, trace.calls[1], prompt[:40], now=1.0)
    # 10 s after c1's record its entry has expired: c2 finds nothing and starts a third.
    third = client.program_of(engine, 0, trace, trace.calls[2], prompt[:70], now=11.0)
    assert engine.started == [first, second, third] == [
        "inferred-0", "inferred-1", "inferred-2"]
    assert client.summary() == dict(calls=3, correct=1, split=2, false_join=0, programs=3)


def test_named_ids_start_each_trace_program_with_its_first_call():
    client, engine = ClientPrograms("named", ttl=10.0), FakeEngine()
    ids = [client.program_of(engine, i, p, c, list(range(100, 100 + c.prompt_len)), 0.0)
           for i, p in enumerate(CONVERSATIONS.programs[:2]) for c in p.calls]
    assert ids == ["chat"] * 3 + ["tree"] * 5 and engine.started == ["chat", "tree"]
    assert client.summary() is None
    result = simulate(CONVERSATIONS, "gittins", program_ids="named")
    assert len(result.programs) == 4 and "inferred_programs" not in result.extra


def test_none_gives_every_call_a_one_call_program():
    trace = CONVERSATIONS.programs[0]
    client, engine = ClientPrograms("none", ttl=10.0), FakeEngine()
    assert [client.program_of(engine, 0, trace, c, list(range(100, 100 + c.prompt_len)), 0.0)
            for c in trace.calls] == [None, None, None]
    assert engine.started == [] and client.summary() is None
    result = simulate(CONVERSATIONS, "gittins", program_ids="none")
    assert len(result.programs) == 4 and "inferred_programs" not in result.extra


def test_the_oracle_and_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="oracle .* explicit ids"):
        simulate(CONVERSATIONS, "oracle", program_ids="inferred")
    with pytest.raises(ValueError, match="program_ids"):
        ClientPrograms("explicit", ttl=1.0)


def test_agentix_bench_sim_takes_program_ids_on_one_engine(capsys):
    import json

    from bench.cli import main

    args = ["sim", "--workload", "lats", "--policy", "gittins", "--rate", "1", "--programs",
            "1", "--json"]
    main(args + ["--program-ids", "inferred"])
    out = json.loads(capsys.readouterr().out)
    counts = out["inferred_programs"]
    assert out["program_ids"] == "inferred" and out["programs_completed"] == 1
    assert counts["calls"] == out["num_calls"] == sum(
        counts[k] for k in ("correct", "split", "false_join"))
    with pytest.raises(SystemExit, match="--program-ids: one engine only"):
        main(args + ["--program-ids", "none", "--replicas", "2"])
