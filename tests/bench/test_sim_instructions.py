"""The instruction-count study reads cachegrind's count and replays a saved trace exactly
(valgrind itself is not needed here)."""

import pickle

import pytest

from bench.sim.simulate import simulate
from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.studies import sim_instructions


def test_reads_the_i_refs_line():
    output = "==12== Cachegrind, a cache and branch-prediction profiler\n" \
             "==12== \n==12== I   refs:      13,915,670,225\n"
    assert sim_instructions.instructions_in(output) == 13_915_670_225
    with pytest.raises(ValueError, match="I refs"):
        sim_instructions.instructions_in("==12== ERROR SUMMARY: 0 errors\n")


def test_replay_simulates_the_saved_trace(tmp_path, capsys):
    trace = Trace((TraceProgram("p", 0.0, (TraceCall("c0", 10, 40),
                                           TraceCall("c1", 60, 2, parents=("c0",))), "t"),))
    saved = tmp_path / "trace.pickle"
    saved.write_bytes(pickle.dumps(trace))
    assert sim_instructions.replay(saved, None) == 0
    assert sim_instructions.replay(saved, "optimized") == simulate(trace, "optimized").num_steps == 42
    sim_instructions.main(["--replay", str(saved), "--policy", "optimized"])
    sim_instructions.main(["--replay", str(saved), "--load-only"])
    assert capsys.readouterr().out.split() == ["42", "0"]
