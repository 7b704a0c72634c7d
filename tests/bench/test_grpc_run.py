import threading

import pytest

from bench import grpc_run
from bench.metrics import compute_metrics
from bench.trace import Trace, TraceCall, TraceProgram

FIELDS = dict(block_size=8, num_kv_blocks=64, num_host_blocks=64, max_num_seqs=2,
              max_num_batched_tokens=64)


def three_programs():
    chain = TraceProgram("chain", 0.0, (TraceCall("c0", 12, 4),
                                        TraceCall("c1", 20, 3, ("c0",), 0.05)), "test")
    fan = TraceProgram("fan", 0.05, (TraceCall("r", 9, 2), TraceCall("x", 11, 5, ("r",)),
                                     TraceCall("y", 7, 3, ("r",)),
                                     TraceCall("z", 5, 2, ("x", "y"))), "test")
    single = TraceProgram("single", 0.1, (TraceCall("s", 30, 6),), "test")
    return Trace((chain, fan, single))


def server_threads():
    return [t for t in threading.enumerate() if t.name in ("agentix-engine", "agentix-grpc")]


@pytest.mark.parametrize("policy", ["optimized", "atlas"])
def test_grpc_run_completes_every_program_and_stops_the_server(tiny_llama_dir, policy):
    trace = three_programs()
    results, server = grpc_run.run_policy(trace, policy, tiny_llama_dir, FIELDS)
    grpc_run.check_tokens(trace, results)  # raises unless every program got its tokens
    by_id = {r.program_id: r for r in results}
    assert {p: (r.generated_tokens, r.num_calls) for p, r in by_id.items()} == {
        "chain": (7, 2), "fan": (12, 4), "single": (6, 1)}
    assert by_id["chain"].finish >= 0.05  # the delay before c1 was slept
    assert all(r.finish > r.arrival for r in results)
    assert compute_metrics(results).programs_completed == 3
    assert server["num_rounds"] > 0 and server["wall_seconds"] > 0
    assert server_threads() == []  # stopped: engine and gRPC threads joined


def test_check_tokens_names_a_short_program():
    from bench.simulate import ProgramResult

    trace = three_programs()
    results = [ProgramResult("chain", "test", 0.0, 1.0, 7, 2),
               ProgramResult("fan", "test", 0.0, 1.0, 11, 4)]
    with pytest.raises(RuntimeError, match="fan: 11 tokens, expected 12"):
        grpc_run.check_tokens(trace, results)


def test_grpc_run_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        grpc_run.build_parser().parse_args(["--policies", "oracle"])
    assert "simulation-only" in capsys.readouterr().err
