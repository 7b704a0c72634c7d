import threading

import pytest

from bench.sim.metrics import compute_metrics
from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.studies.grpc_runs import grpc_run

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


def test_default_policies_differ_in_scheduling_then_in_memory():
    assert grpc_run.DEFAULT_POLICIES == ("optimized", "atlas-lru", "atlas")


@pytest.mark.parametrize("policy", grpc_run.DEFAULT_POLICIES)
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
    # Prompts less cached full blocks of 8 (each program's calls share its token stream):
    # chain 12 + (20 - 8); fan 9 + (11 - 8) + 7 + 5; single 30.
    assert server["prefill_tokens_computed"] == 24 + 24 + 30
    # Every call streamed a first token after it was sent, within the run.
    assert 0 < server["ttft_p50_s"] <= server["ttft_p99_s"] < server["wall_seconds"]
    assert server_threads() == []  # stopped: engine and gRPC threads joined


def test_tool_delays_go_to_later_calls_without_one():
    delayed = grpc_run.with_tool_delays(three_programs(), seed=0, delay_range=(0.25, 0.25))
    assert {p.program_id: [c.delay for c in p.calls] for p in delayed.programs} == {
        "chain": [0.0, 0.05], "fan": [0.0, 0.25, 0.25, 0.25], "single": [0.0]}
    assert [c.call_id for c in delayed.programs[1].calls] == ["r", "x", "y", "z"]


def test_tool_delays_are_drawn_per_seed_from_the_bfcl_range():
    a, b, c = (grpc_run.with_tool_delays(three_programs(), seed) for seed in (1, 1, 2))
    delays = [call.delay for call in a.programs[1].calls[1:]]
    assert a == b and a != c
    assert all(0.1 <= d <= 1.0 for d in delays) and len(set(delays)) == 3


def test_format_metrics_names_the_prefill_tokens():
    from bench.sim.simulate import ProgramResult

    metrics = compute_metrics([ProgramResult("p", "test", 0.0, 2.0, 4, 1)])
    assert grpc_run.format_metrics("atlas-lru", metrics, 78) == (
        "atlas-lru  mean 0.5000  P50 0.5000  P95 0.5000  s/token;  throughput 2.0 tokens/s, "
        "makespan 2.0 s;  prefill computed 78 tokens")


def test_check_tokens_names_a_short_program():
    from bench.sim.simulate import ProgramResult

    trace = three_programs()
    results = [ProgramResult("chain", "test", 0.0, 1.0, 7, 2),
               ProgramResult("fan", "test", 0.0, 1.0, 11, 4)]
    with pytest.raises(RuntimeError, match="fan: 11 tokens, expected 12"):
        grpc_run.check_tokens(trace, results)


def test_grpc_run_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        grpc_run.build_parser().parse_args(["--policies", "oracle"])
    assert "simulation-only" in capsys.readouterr().err
