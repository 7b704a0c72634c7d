import pytest

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.support.real_run import run_real
from bench.support.wall_clock import WallClock


def test_wall_clock_jumps_forward_only_and_ignores_advance():
    clock = WallClock(start=5.0)
    assert 5.0 <= clock() < 6.0
    clock.jump_to(100.0)
    assert 100.0 <= clock.now < 101.0
    clock.jump_to(50.0)  # never back
    assert clock() >= 100.0
    before = clock()
    clock.advance(10.0)
    assert clock() < before + 1.0
    with pytest.raises(ValueError):
        clock.advance(-1.0)
    clock.restart(0.0)
    assert 0.0 <= clock() < 1.0


TINY_FIELDS = dict(block_size=8, num_kv_blocks=64, num_host_blocks=64, max_num_seqs=4,
                   max_num_batched_tokens=64)


def two_program_trace(second_arrival=0.05):
    a = TraceProgram("A", 0.0, (TraceCall("c0", 12, 4), TraceCall("c1", 20, 3, ("c0",), 0.01)),
                     "test")
    b = TraceProgram("B", second_arrival, (TraceCall("r", 9, 2), TraceCall("x", 11, 5, ("r",)),
                                           TraceCall("y", 7, 3, ("r",)),
                                           TraceCall("z", 5, 2, ("x", "y"))), "test")
    return Trace((a, b))


@pytest.mark.parametrize("policy", ["atlas", "vllm"])
def test_run_real_finishes_every_call_on_the_tiny_model(tiny_llama_dir, policy):
    trace = two_program_trace(second_arrival=500.0)  # an idle gap, skipped by the clock
    result = run_real(trace, policy, tiny_llama_dir, TINY_FIELDS)
    assert sorted(result.call_finish) == ["A/c0", "A/c1", "B/r", "B/x", "B/y", "B/z"]
    assert {p.program_id: p.generated_tokens for p in result.programs} == {"A": 7, "B": 12}
    b = next(p for p in result.programs if p.program_id == "B")
    assert b.finish > 500.0 and result.end_time > 500.0
    assert result.wall_seconds < 60.0  # the 500 s gap was skipped, not slept
    assert result.call_start["B/z"] >= max(result.call_finish["B/x"], result.call_finish["B/y"])
    assert result.call_start["A/c1"] >= result.call_finish["A/c0"] + 0.01
    assert result.num_steps > 0 and result.num_kv_blocks == 64
    assert result.busy_seconds > 0
    assert result.call_first_token.keys() == result.call_finish.keys()
    assert all(t > result.call_start[k] for k, t in result.call_first_token.items())
    assert result.num_preemptions == result.scheduler_stats["num_preemptions"] == 0
    # Prompts, less (atlas: prefix caching) the full blocks of 8 a call shares with its
    # program's earlier calls: A/c1 and B/x 8 each.
    assert result.prefill_tokens_computed == {"atlas": 64 - 16, "vllm": 64}[policy]


def test_run_real_refuses_the_oracle(tiny_llama_dir):
    with pytest.raises(ValueError, match="simulation-only"):
        run_real(two_program_trace(), "oracle", tiny_llama_dir, TINY_FIELDS)

