import pytest

from bench.sim.baselines import BASELINES
from bench.sim.cost_model import CostModel, gpu_preset, model_preset
from bench.sim.sim_executor import SIM_TOKEN_ID, SimulatedExecutor, VirtualClock
from bench.sim.simulate import PromptMaker, simulate
from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads import lats
from bench.studies.hash_steps import without_history_chains
from scheduler.plan import ScheduledChunk, SchedulePlan
from scheduler.history_chains import HistoryChains
from scheduler.process_table import ProgramLimitError


class UnitStepCost(CostModel):
    """Every non-empty step costs exactly 1 s, whatever it runs; swaps cost 0.25 s each."""

    def __init__(self) -> None:
        super().__init__(gpu_preset("a100-80g"), model_preset("llama-3.1-8b"))

    def step_seconds_from_totals(self, new_tokens, pairs, kv_tokens, new_round=True):
        return 1.0 if new_tokens else 0.0

    def swap_seconds(self, num_blocks, bytes_per_block):
        return 0.25 if num_blocks else 0.0


def make_program(program_id, arrival, *calls):
    return TraceProgram(program_id, arrival, tuple(calls), "test")


def make_call(call_id, prompt_len=10, output_len=3, parents=(), delay=0.0):
    return TraceCall(call_id, prompt_len, output_len, tuple(parents), delay)


def run(trace, policy="vllm", **overrides):
    return simulate(trace, policy, cost_model=UnitStepCost(), engine_overrides=overrides or None)


def finish_times(result):
    return {p.program_id: p.finish for p in result.programs}


# ----- the executor -----------------------------------------------------------------------
class FakeCall:
    call_id = "c"


def test_executor_advances_the_clock_and_charges_one_transfer_per_direction():
    clock = VirtualClock(5.0)
    executor = SimulatedExecutor(UnitStepCost(), clock)
    plan = SchedulePlan(created_at=5.0, swap_out=[(1, 0), (2, 1), (3, 2)], swap_in=[(0, 4)])
    plan.chunks = [ScheduledChunk(FakeCall(), 7, 1, [1], True),
                   ScheduledChunk(FakeCall(), 0, 8, [2], False)]
    result = executor.execute(plan)
    assert result.tokens == [SIM_TOKEN_ID, None]
    assert result.swap_seconds == 0.5
    assert clock() == 6.5
    assert executor.num_steps == 1 and executor.num_swap_transfers == 2
    assert executor.num_tokens_computed == 9  # one decode token + an 8-token chunk


def test_executor_continues_each_program_stream_with_next_token():
    maker = PromptMaker(vocab=1000)  # made-up ids 100..999, span 900
    executor = SimulatedExecutor(UnitStepCost(), VirtualClock(), next_token=maker.next_token)
    call = FakeCall()
    call.all_token_ids = [100, 101, 998, 999]
    plan = SchedulePlan(created_at=0.0)
    plan.chunks = [ScheduledChunk(call, 3, 1, [1], True)]
    assert executor.execute(plan).tokens == [100]  # 999 wraps round to the first made-up id
    call.all_token_ids = [500, 501]
    assert executor.execute(plan).tokens == [502]


def test_each_segment_of_a_program_has_its_own_ids_after_the_shared_prefix():
    maker = PromptMaker(vocab=1000)
    program = TraceProgram("p", 0.0, (TraceCall("a", 8, 1),), "w", "sys", 3)
    main, later = (maker.prompt(4, TraceCall(c, n, 1), program) for c, n in (("a", 8), ("b", 12)))
    assert later[:8] == main  # one context: the history is a prefix
    fresh = maker.prompt(4, TraceCall("c", 8, 1, segment=1), program)
    assert fresh[:3] == main[:3] and fresh[3] != main[3]  # the system prompt only
    assert maker.prompt(4, TraceCall("d", 8, 1, segment=1), program) == fresh
    assert maker.prompt(5, TraceCall("e", 8, 1, segment=1), program)[3:] != fresh[3:]


def test_executor_uses_the_cost_model_for_real_presets():
    cost = CostModel.from_names("a100-80g", "llama-3.1-8b")
    clock = VirtualClock()
    plan = SchedulePlan(created_at=0.0)
    plan.chunks = [ScheduledChunk(FakeCall(), 99, 1, [1] * 7, True)]
    SimulatedExecutor(cost, clock).execute(plan)
    assert clock() == pytest.approx(cost.step_seconds([(1, 100)]))
    assert clock() >= 8e-3


# ----- hand-derived schedules -------------------------------------------------------------
def test_two_one_call_programs_follow_the_hand_derived_schedule():
    # A: prefill [0,1] (token 1), decodes [1,2], [2,3]: done at 3.
    # B arrives at 0.5, is added after the step in flight, at t=1; it is batched with A's
    # decode: prefill [1,2] (token 1), decodes [2,3], [3,4]: done at 4.
    trace = Trace((make_program("A", 0.0, make_call("c", output_len=3)),
                   make_program("B", 0.5, make_call("c", output_len=3))))
    result = run(trace)
    assert finish_times(result) == {"A": 3.0, "B": 4.0}
    assert result.call_start == {"A/c": 0.0, "B/c": 1.0}
    assert result.finish_order == ["A", "B"]
    assert result.num_steps == 4 and result.end_time == 4.0
    assert {p.program_id: p.generated_tokens for p in result.programs} == {"A": 3, "B": 3}


def test_time_to_first_token_is_per_call_from_when_it_was_added():
    # One seat, FCFS. A: prefill [0,1] (first token at 1), decodes until 3. C (0.25) and B
    # (0.5) are added at 1, C/c0 first; C/c0: prefill [3,4], done. B: prefill [4,5], decode
    # [5,6]. C/c1 is ready at 4.5 and added after the step in flight, at 5: prefill [6,7].
    trace = Trace((make_program("A", 0.0, make_call("c", output_len=3)),
                   make_program("C", 0.25, make_call("c0", output_len=1),
                                make_call("c1", output_len=1, parents=["c0"], delay=0.5)),
                   make_program("B", 0.5, make_call("c", output_len=2))))
    result = run(trace, "vllm", max_num_seqs=1)
    assert result.call_start == {"A/c": 0.0, "C/c0": 1.0, "B/c": 1.0, "C/c1": 5.0}
    assert result.call_first_token == {"A/c": 1.0, "C/c0": 4.0, "B/c": 5.0, "C/c1": 7.0}
    assert result.call_finish == {"A/c": 3.0, "C/c0": 4.0, "B/c": 6.0, "C/c1": 7.0}
    assert result.ttfts == [1.0, 3.0, 4.0, 2.0]
    assert result.ttft_percentile(50) == 2.5 and result.ttft_percentile(99) == 3.97
    # 4 prompts of 10 tokens, then A's 2 decodes and B's 1.
    assert (result.num_tokens_computed, result.prefill_tokens_computed) == (43, 40)


def test_a_recompute_counts_its_prompt_and_generated_kv_as_prefill():
    # 3 usable blocks of 16 tokens: both 16-token prompts prefill in [0,1]; at the first
    # decode both need a second block, so B (FCFS: the lowest priority) is dropped. A decodes
    # until 20; B recomputes its prompt and first token [20,21] and decodes until 39.
    trace = Trace((make_program("A", 0.0, make_call("c", prompt_len=16, output_len=20)),
                   make_program("B", 0.0, make_call("c", prompt_len=16, output_len=20))))
    result = run(trace, "vllm", num_kv_blocks=4)
    assert result.call_first_token == {"A/c": 1.0, "B/c": 1.0}
    assert result.call_finish == {"A/c": 20.0, "B/c": 39.0}
    assert result.num_preemptions == result.scheduler_stats["num_preemptions"] == 1
    # A: 16 + 19 decodes; B: 16, then 16 + 1 recomputed, then 18 decodes.
    assert result.num_tokens_computed == 35 + 16 + 17 + 18
    assert result.prefill_tokens_computed == 16 + 16 + 16  # the first token's KV is a decode
    # Gaps: A's 19 of 1 s; B's 20 s while dropped (token 1 at 1, token 2 at 21), then 18 of 1.
    assert result.itl_percentile(50) == result.itl_percentile(99, {"A"}) == 1.01
    assert 20.0 <= result.itl_percentile(99) < 20.0 * 1.01  # the 38th of 38 gaps
    assert result.itl_percentile(97) == 1.01  # the 37th


def test_prefix_cache_hits_are_not_prefill():
    # c1's prompt starts with c0's 40 tokens; 2 full blocks (32 tokens) of them are cached.
    program = make_program("P", 0.0, make_call("c0", prompt_len=40, output_len=3),
                           make_call("c1", prompt_len=60, output_len=2, parents=["c0"]))
    result = run(Trace((program,)), "optimized")
    assert result.prefill_tokens_computed == 40 + (60 - 32)
    assert result.num_tokens_computed == 40 + 2 + 28 + 1


def test_idle_engine_jumps_to_the_next_arrival():
    trace = Trace((make_program("A", 0.0, make_call("c", output_len=2)),
                   make_program("B", 10.25, make_call("c", output_len=2))))
    result = run(trace)
    assert finish_times(result) == {"A": 2.0, "B": 12.25}
    assert result.num_steps == 4  # no idle steps between 2 and 10.25


def test_dag_dependencies_and_delays_are_respected():
    # c0 waits 1 s after arrival: [1,2], [2,3] -> done at 3.
    # c2 (no delay) is added at 3: [3,4] -> done at 4. c1 (delay 2.5) is added at 5.5: done 6.5.
    # c3 needs c1 and c2: added at 6.5, two steps -> done at 8.5.
    program = make_program(
        "P", 0.0,
        make_call("c0", output_len=2, delay=1.0),
        make_call("c1", output_len=1, parents=["c0"], delay=2.5),
        make_call("c2", output_len=1, parents=["c0"]),
        make_call("c3", output_len=2, parents=["c1", "c2"]))
    result = run(Trace((program,)), policy="atlas")
    assert result.call_start == {"P/c0": 1.0, "P/c2": 3.0, "P/c1": 5.5, "P/c3": 6.5}
    assert result.call_finish == {"P/c0": 3.0, "P/c2": 4.0, "P/c1": 6.5, "P/c3": 8.5}
    (record,) = result.programs
    assert (record.arrival, record.finish, record.generated_tokens, record.num_calls) == \
        (0.0, 8.5, 6, 4)


def test_parallel_calls_run_together():
    program = make_program("P", 0.0, make_call("root", output_len=1),
                           *(make_call(f"b{i}", output_len=2, parents=["root"]) for i in range(3)))
    result = run(Trace((program,)), policy="atlas")
    assert result.call_finish == {"P/root": 1.0, "P/b0": 3.0, "P/b1": 3.0, "P/b2": 3.0}


def crafted_trace():
    """A long call, then a short one arriving while it runs, with room for one call at once."""
    return Trace((make_program("long", 0.0, make_call("c", output_len=30)),
                  make_program("short", 0.5, make_call("c", output_len=5))))


def test_fcfs_runs_the_long_program_first():
    result = run(crafted_trace(), "vllm", max_num_seqs=1)
    # long: [0,30]; short waits until then: prefill [30,31], decodes until 35.
    assert finish_times(result) == {"long": 30.0, "short": 35.0}
    assert result.finish_order == ["long", "short"]


@pytest.mark.parametrize("policy", ["plas", "atlas", "las", "mlfq"])
def test_service_based_policies_let_the_short_program_overtake(policy):
    result = run(crafted_trace(), policy, max_num_seqs=1, quantum_base=2.0)
    assert result.finish_order == ["short", "long"]
    assert result.num_preemptions >= 1
    # Far ahead of its FCFS finish (35); it may wait for a multistep round (4 steps) to end.
    assert finish_times(result)["short"] < 12


def test_oracle_serves_the_least_remaining_work_first():
    # The oracle orders one queue (no priority preemption): while "first" runs, "long" and
    # then "short" queue up; FCFS takes them in arrival order, the oracle takes "short" first.
    trace = Trace((make_program("first", 0.0, make_call("c", output_len=3)),
                   make_program("long", 0.25, make_call("c", output_len=30)),
                   make_program("short", 0.5, make_call("c", output_len=5))))
    fcfs = run(trace, "vllm", max_num_seqs=1)
    oracle = run(trace, "oracle", max_num_seqs=1)
    assert fcfs.finish_order == ["first", "long", "short"]
    assert finish_times(fcfs) == {"first": 3.0, "long": 33.0, "short": 38.0}
    assert oracle.finish_order == ["first", "short", "long"]
    assert finish_times(oracle) == {"first": 3.0, "short": 8.0, "long": 38.0}


# ----- bigger runs ------------------------------------------------------------------------
@pytest.mark.parametrize("policy", sorted(BASELINES))
def test_every_baseline_completes_a_small_lats_trace(policy):
    trace = lats.generate(3, seed=1, rate=2.0)
    result = simulate(trace, policy)
    assert len(result.programs) == 3
    calls = sum(len(p.calls) for p in trace.programs)
    assert len(result.call_finish) == calls
    tokens = {p.program_id: sum(c.output_len for c in p.calls) for p in trace.programs}
    assert {p.program_id: p.generated_tokens for p in result.programs} == tokens
    assert result.end_time > 0
    assert result.call_first_token.keys() == result.call_finish.keys()
    assert all(result.call_start[k] < t <= result.call_finish[k]
               for k, t in result.call_first_token.items())
    assert result.scheduler_stats["num_preemptions"] == result.num_preemptions
    if result.num_preemptions == 0:  # nothing recomputed: at most every prompt
        prompts = sum(c.prompt_len for p in trace.programs for c in p.calls)
        assert 0 < result.prefill_tokens_computed <= prompts


@pytest.mark.parametrize("mode", ["swap", "recompute"])
def test_tight_memory_preempts_and_still_completes_cleanly(mode):
    # 8 parallel calls of 100 + 60 tokens (10 blocks each) in 29 usable blocks: they grow
    # into each other and some must be preempted. simulate() checks integrity at the end.
    program = make_program("P", 0.0, *(make_call(f"b{i}", prompt_len=100, output_len=60)
                                       for i in range(8)))
    result = simulate(Trace((program,)), "atlas",
                      engine_overrides=dict(num_kv_blocks=30, preemption_mode=mode))
    (record,) = result.programs
    assert record.generated_tokens == 8 * 60
    assert result.num_preemptions > 0
    if mode == "swap":
        assert result.num_swap_outs > 0 and result.swap_seconds > 0
    else:
        assert result.num_swap_outs == 0 and result.swap_seconds == 0


def test_prompts_share_exactly_the_programs_shared_prefix():
    maker = PromptMaker(vocab=128256)
    call = make_call("c", prompt_len=40)
    a = maker.prompt(0, call, TraceProgram("a", 0.0, (call,), "t", "docs-1", 24))
    b = maker.prompt(1, call, TraceProgram("b", 0.0, (call,), "t", "docs-1", 24))
    c = maker.prompt(2, call, TraceProgram("c", 0.0, (call,), "t", "docs-2", 24))
    plain = maker.prompt(1, call)
    assert len(a) == len(b) == len(c) == 40
    assert a[:24] == b[:24] and a[24:] != b[24:]
    assert b[24:] == plain[24:]  # after the shared part, the program's own stream
    assert a[0] != c[0]  # another key, another stream from the first token


def test_bad_arguments_name_the_field():
    trace = Trace((make_program("A", 0.0, make_call("c")),))
    with pytest.raises(ValueError, match="policy"):
        simulate(trace, "round-robin")
    with pytest.raises(ValueError, match="engine_overrides"):
        simulate(trace, "atlas", engine_overrides={"no_such_field": 1})
    with pytest.raises(ValueError, match="preset"):
        simulate(trace, "atlas", preset="v100")


# ----- the command line -------------------------------------------------------------------
def test_agentix_bench_sim_prints_one_json_object(capsys):
    import json

    from server.cli import main

    main(["bench", "sim", "--workload", "lats", "--policy", "atlas", "--rate", "1",
          "--programs", "2", "--seed", "0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["programs_completed"] == 2
    for key in ("mean_norm_latency", "p50_norm_latency", "p95_norm_latency",
                "p99_norm_latency", "throughput_tokens_per_s", "makespan_s"):
        assert out[key] > 0
    assert out["p50_norm_latency"] <= out["p95_norm_latency"] <= out["p99_norm_latency"]
    assert list(out["by_workload"]) == ["lats"]  # one workload: the same figures again
    assert out["by_workload"]["lats"]["mean_norm_latency"] == out["mean_norm_latency"]
    assert out["num_tokens_computed"] >= out["generated_tokens"]
    assert out["prefill_tokens_computed"] == (out["num_tokens_computed"] - out["generated_tokens"]
                                              + out["num_calls"])
    assert 0 < out["ttft_p50_s"] <= out["ttft_p99_s"]
    assert out["scheduler_stats"]["num_preemptions"] == out["num_preemptions"]


def test_agentix_bench_sim_overrides_engine_fields(capsys):
    import json

    from bench.cli import main

    args = ["sim", "--workload", "lats", "--policy", "atlas", "--rate", "1", "--programs", "1",
            "--json"]
    main(args + ["--set", "multistep=1", "--set", "starvation_beta=None"])
    one = json.loads(capsys.readouterr().out)
    assert one["overrides"] == {"multistep": 1, "starvation_beta": None}
    main(args + ["--set", "multistep=8"])
    eight = json.loads(capsys.readouterr().out)
    assert eight["overrides"] == {"multistep": 8}
    assert eight["num_steps"] != one["num_steps"]  # the engine ran with it
    with pytest.raises(ValueError, match="unknown field"):
        main(args + ["--set", "no_such_field=1"])
    with pytest.raises(SystemExit):
        main(args + ["--set", "multistep"])
    assert "expected FIELD=VALUE" in capsys.readouterr().err


def test_agentix_bench_sim_rejects_bad_arguments(capsys):
    from bench.cli import main

    with pytest.raises(SystemExit):
        main(["sim", "--workload", "lats", "--rate", "0"])
    assert "--rate" in capsys.readouterr().err


def test_more_live_programs_than_the_engines_tenant_bound_all_run():
    # 1,200 one-call programs arrive at once, each waiting 5 s before its call: all are live
    # together, past the engine's default 1,000 per tenant, which the simulator lifts (it
    # measures scheduling, not admission control); an override still binds
    trace = Trace(tuple(make_program(f"p{i}", 0.0, make_call("c", 16, 1, delay=5.0))
                        for i in range(1200)))
    result = run(trace, "optimized")
    assert len(result.programs) == 1200
    assert {p.finish for p in result.programs} == {6.0, 7.0, 8.0, 9.0, 10.0}
    with pytest.raises(ProgramLimitError, match="max_programs_per_tenant"):
        run(trace, "optimized", max_programs_per_tenant=1000)


@pytest.mark.parametrize("policy", ["atlas", "gittins"])
def test_history_chains_change_no_result(monkeypatch, policy):
    """A program's next call starting from its last call's chain hashes (scheduler
    HistoryChains) is only a saving: with none kept, every figure is the same."""
    trace = lats.generate(4, seed=2, rate=4.0)  # trees: siblings leave the history
    seeded = []
    hashes_for = HistoryChains.hashes_for
    monkeypatch.setattr(HistoryChains, "hashes_for", lambda self, program_id, token_ids:
                        seeded.append(hashes_for(self, program_id, token_ids)) or seeded[-1])
    kept = simulate(trace, policy, engine_overrides=dict(num_kv_blocks=200))
    assert sum(map(bool, seeded)) > len(seeded) // 2  # most calls started from a history
    with without_history_chains():
        none_kept = simulate(trace, policy, engine_overrides=dict(num_kv_blocks=200))
    assert kept.call_finish == none_kept.call_finish
    assert kept.call_first_token == none_kept.call_first_token
    assert [(p.program_id, p.finish) for p in kept.programs] == \
        [(p.program_id, p.finish) for p in none_kept.programs]
    assert (kept.num_steps, kept.prefill_tokens_computed, kept.num_preemptions) == \
        (none_kept.num_steps, none_kept.prefill_tokens_computed, none_kept.num_preemptions)
