import pytest

from bench.analysis.sweep import generate_trace
from bench.sim.cost_model import CostModel
from bench.sim.simulate import PromptMaker, simulate
from bench.sim.trace import TraceCall, TraceProgram
from bench.studies import ttft_floor
from bench.studies.ttft_floor import (prefill_seconds, program_floors, shared_prefix,
                                     trace_floors)

COST = CostModel.from_names("a100-80g", "llama-3.1-8b")


def test_shared_prefix_counts_whole_blocks_from_the_start():
    a = list(range(10))
    assert shared_prefix(a, a, 4) == 8  # the partial third block does not count
    assert shared_prefix(a, a[:6] + [99] + a[7:], 4) == 4
    assert shared_prefix(a, [99] + a[1:], 4) == 0
    assert shared_prefix(a, a[:5], 4) == 4 and shared_prefix(a, [], 4) == 0
    assert shared_prefix(a, a, 1) == 10


def test_prefill_runs_in_chunks_of_the_step_budget():
    expected = (COST.step_seconds([(4, 4)]) + COST.step_seconds([(4, 8)])
                + COST.step_seconds([(2, 10)]))
    assert prefill_seconds(COST, 0, 10, 4) == pytest.approx(expected, rel=1e-12)
    assert prefill_seconds(COST, 8, 10, 4) == COST.step_seconds([(2, 10)])
    assert prefill_seconds(COST, 10, 10, 4) == 0.0


def test_a_call_reuses_its_parents_kv_and_the_shared_system_prompt():
    calls = (TraceCall("a", 100, 10),
             TraceCall("b", 150, 5, ("a",)),  # a's prompt and 9 of its 10 tokens: 109
             TraceCall("sub", 70, 5, ("a",), segment=1),  # its own context: the prefix only
             TraceCall("c", 156, 3, ("b",)))  # b's 150 + 4 tokens with KV: 144 in blocks
    program = TraceProgram("p", 0.0, calls, "test", prefix_key="tools", prefix_len=40)
    floors = program_floors(program, 3, PromptMaker(COST.model.vocab), COST, 16, 64)
    assert [(f.call_id, f.prompt_len, f.cached) for f in floors] == [
        ("a", 100, 32), ("b", 150, 96), ("sub", 70, 32), ("c", 156, 144)]
    assert floors[1].new_tokens == 54
    assert floors[1].seconds == prefill_seconds(COST, 96, 150, 64)
    assert floors[1].uncached_seconds == prefill_seconds(COST, 0, 150, 64)
    whole = TraceProgram("q", 0.0, (TraceCall("a", 31, 2), TraceCall("b", 32, 2, ("a",))),
                         "test")
    floors = program_floors(whole, 0, PromptMaker(COST.model.vocab), COST, 16, 64)
    assert [f.cached for f in floors] == [0, 31]  # all 32 cached: the last token is computed


def test_the_study_prints_a_row_per_workload(capsys):
    ttft_floor.main(["--workloads", "lats", "--programs", "2", "--target", "0.01"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("First-token floor alone on an idle llama-3.1-8b x a100-80g")
    row = [line for line in lines if line.startswith("| lats |")]
    assert len(row) == 1 and "over 0.01 s" in lines[2]
    for bad in (["--programs", "0"], ["--programs", "10001"], ["--target", "0"],
                ["--workloads", "coding,nope"]):
        with pytest.raises(SystemExit):
            ttft_floor.main(bad)
    assert "unknown nope (known: sharegpt, bfcl" in capsys.readouterr().err


def test_the_floor_is_the_simulators_first_token_on_an_idle_engine():
    trace = generate_trace("coding", 1, 0, 1e-5)
    floors = trace_floors(trace, COST)
    result = simulate(trace, "gittins")
    program = trace.programs[0]
    ttfts = [result.call_first_token[key] - result.call_start[key]
             for key in (f"{program.program_id}/{call.call_id}" for call in program.calls)]
    assert len(ttfts) == len(floors) > 10
    # The first call finds the shared system prompt cold; every later one its floor exactly.
    assert ttfts[0] > floors[0].seconds
    assert ttfts[1:] == pytest.approx([f.seconds for f in floors[1:]], rel=1e-6)
