import pytest

from bench import calibrate as cal
from bench.cli import build_parser
from bench.cost_model import CostModel, ModelPreset, batch_totals
from bench.scaled_trace import scale_trace
from bench.trace import Trace, TraceCall, TraceProgram
from bench.wall_clock import WallClock
from bench.workloads import lats

SMOLLM2_LIKE = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                "vocab_size": 49152, "tie_word_embeddings": True}


def make_trace(*programs):
    return Trace(tuple(programs))


# ----- the scaled-down trace ----------------------------------------------------------------
def hand_made_trace():
    calls = (TraceCall("c0", 100, 33), TraceCall("c1", 40, 7, ("c0",), 1.0),
             TraceCall("c2", 25, 19, ("c0",)), TraceCall("c3", 50, 10, ("c1", "c2"), 0.5),
             TraceCall("c4", 9, 9, ("c3",)))
    ids = TraceCall("d0", 12, 30, prompt_token_ids=tuple(range(200, 212)))
    return make_trace(TraceProgram("A", 2.0, calls, "test"), TraceProgram("B", 3.5, (ids,), "test"))


def test_scaled_trace_has_the_exact_scaled_lengths_and_caps():
    out = scale_trace(hand_made_trace(), scale=10, max_calls=3, time_scale=2.0)
    a, b = out.programs
    assert [(c.call_id, c.prompt_len, c.output_len, c.parents, c.delay) for c in a.calls] == [
        ("c0", 10, 3, (), 0.0), ("c1", 4, 1, ("c0",), 2.0), ("c2", 2, 1, ("c0",), 0.0)]
    assert (a.arrival, b.arrival) == (4.0, 7.0)
    assert (b.calls[0].prompt_len, b.calls[0].output_len) == (1, 3)
    assert b.calls[0].prompt_token_ids == (200,)


def test_scaled_trace_is_deterministic_and_a_valid_dag():
    trace = lats.generate(3, seed=5, rate=1.0)
    out = scale_trace(trace, scale=16, max_calls=8)
    assert out == scale_trace(trace, scale=16, max_calls=8)
    for original, program in zip(trace.programs, out.programs):
        assert 1 <= len(program.calls) <= 8
        kept = set()
        for call, source in zip(program.calls, original.calls):
            assert set(call.parents) <= kept  # parents come first and are kept
            kept.add(call.call_id)
            assert call.prompt_len == max(1, source.prompt_len // 16) >= 1
            assert call.output_len == max(1, source.output_len // 16) >= 1
    # scale 1 and a large cap give the trace back
    assert scale_trace(trace, scale=1, max_calls=10_000) == trace


@pytest.mark.parametrize("kwargs, field", [(dict(scale=0.5), "scale"), (dict(max_calls=0),
                         "max_calls"), (dict(time_scale=-1.0), "time_scale")])
def test_scaled_trace_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        scale_trace(hand_made_trace(), **kwargs)


# ----- the clock ----------------------------------------------------------------------------
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


# ----- the cost model additions and the fit -------------------------------------------------
def test_model_preset_from_hf_config_counts_the_parameters(tiny_llama):
    import json
    from pathlib import Path

    model_dir, hf_model = tiny_llama
    preset = cal.model_preset_for(model_dir)
    assert preset.params == sum(p.numel() for p in hf_model.parameters())
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    assert (preset.layers, preset.hidden, preset.q_heads, preset.kv_heads, preset.head_dim,
            preset.vocab, preset.dtype_bytes) == (cfg["num_hidden_layers"], cfg["hidden_size"],
                                                  4, 2, 16, 384, 4)


def test_step_work_is_what_step_seconds_rates():
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    assert model.params == pytest.approx(134.5e6, rel=1e-3)
    cost = CostModel(cal.cpu_preset(50e9, 20e9), model, 0.004, 0.001)
    chunks = [(1, 40), (1, 300), (64, 64)]
    flops, nbytes = cost.step_work(*batch_totals(chunks))
    assert cost.step_seconds(chunks) == pytest.approx(0.005 + max(flops / 50e9, nbytes / 20e9))
    assert cost.step_seconds(chunks, new_round=False) == pytest.approx(
        0.004 + max(flops / 50e9, nbytes / 20e9))
    assert batch_totals([(4, 10), (1, 7)]) == (5, 4 * 10 - 6 + 7, 17)
    with pytest.raises(ValueError, match="chunk"):
        batch_totals([(5, 4)])


def synthetic_samples(cost):
    shapes = [((n, n),) for n in (1, 8, 32, 128, 512)]
    shapes += [((1, ctx),) * b for b in (1, 2, 4, 8) for ctx in (20, 300)]
    shapes += [((1, 50),) * b + ((32, 96),) for b in (1, 3)]
    return [cal.StepSample(tuple(s), new_round, cost.step_seconds(s, new_round))
            for s in shapes for new_round in (True, False)]


@pytest.mark.parametrize("weigh_by_calls", [False, True])
def test_fit_recovers_known_constants(weigh_by_calls):
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    truth = CostModel(cal.cpu_preset(50e9, 20e9), model, 0.004, 0.001)
    fit = cal.fit_step_times(synthetic_samples(truth), model, weigh_by_calls)
    assert fit.flops_rate == pytest.approx(50e9, rel=0.01)
    assert fit.byte_rate == pytest.approx(20e9, rel=0.01)
    assert fit.step_overhead == pytest.approx(0.004, rel=0.01)
    assert fit.schedule_overhead == pytest.approx(0.001, rel=0.01)
    assert fit.rms_rel_error < 1e-6 and fit.num_samples == len(synthetic_samples(truth))


def test_fit_needs_both_kinds_of_steps():
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    truth = CostModel(cal.cpu_preset(50e9, 20e9), model, 0.004, 0.001)
    one_shape = [cal.StepSample(((1, 20),), r, truth.step_seconds([(1, 20)], r))
                 for r in (True, False, True, False)]  # one flops/bytes ratio only
    with pytest.raises(ValueError, match="both"):
        cal.fit_step_times(one_shape, model)
    with pytest.raises(ValueError, match="at least 4"):
        cal.fit_step_times(one_shape[:3], model)
    with pytest.raises(ValueError, match="positive"):
        cal.fit_step_times([cal.StepSample(s.chunks, s.new_round, 0.0)
                            for s in synthetic_samples(truth)], model)


def test_calibration_round_trips_through_json(tmp_path):
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    fit = cal.Fit(60e9, 12e9, 0.03, 0.002, 0.1, 0.2, 40)
    calibration = cal.Calibration(model, fit, 4e9, 1e-5, 1, "/somewhere", 12.0)
    path = tmp_path / "c.json"
    cal.save_calibration(calibration, path, {"checks": []})
    again = cal.load_calibration(path)
    assert again == calibration
    chunks = [(1, 100), (1, 30), (200, 260)]
    assert again.cost_model().step_seconds(chunks) == calibration.cost_model().step_seconds(chunks)
    assert again.cost_model().swap_seconds(3, 1000) == pytest.approx(3000 / 4e9 + 1e-5)


# ----- the real engine ----------------------------------------------------------------------
TINY_FIELDS = dict(block_size=8, num_kv_blocks=64, num_host_blocks=64, max_num_seqs=4,
                   max_num_batched_tokens=64)


def two_program_trace(second_arrival=0.05):
    a = TraceProgram("A", 0.0, (TraceCall("c0", 12, 4), TraceCall("c1", 20, 3, ("c0",), 0.01)),
                     "test")
    b = TraceProgram("B", second_arrival, (TraceCall("r", 9, 2), TraceCall("x", 11, 5, ("r",)),
                                           TraceCall("y", 7, 3, ("r",)),
                                           TraceCall("z", 5, 2, ("x", "y"))), "test")
    return make_trace(a, b)


@pytest.mark.parametrize("policy", ["atlas", "vllm"])
def test_run_real_finishes_every_call_on_the_tiny_model(tiny_llama_dir, policy):
    trace = two_program_trace(second_arrival=500.0)  # an idle gap, skipped by the clock
    result = cal.run_real(trace, policy, tiny_llama_dir, TINY_FIELDS)
    assert sorted(result.call_finish) == ["A/c0", "A/c1", "B/r", "B/x", "B/y", "B/z"]
    assert {p.program_id: p.generated_tokens for p in result.programs} == {"A": 7, "B": 12}
    b = next(p for p in result.programs if p.program_id == "B")
    assert b.finish > 500.0 and result.end_time > 500.0
    assert result.wall_seconds < 60.0  # the 500 s gap was skipped, not slept
    assert result.call_start["B/z"] >= max(result.call_finish["B/x"], result.call_finish["B/y"])
    assert result.call_start["A/c1"] >= result.call_finish["A/c0"] + 0.01
    assert result.num_steps > 0 and result.num_kv_blocks == 64
    assert result.busy_seconds > 0


def test_run_real_refuses_the_oracle(tiny_llama_dir):
    with pytest.raises(ValueError, match="simulation-only"):
        cal.run_real(two_program_trace(), "oracle", tiny_llama_dir, TINY_FIELDS)


def test_probes_and_swaps_measure_the_tiny_model(tiny_llama_dir):
    probes = cal.Probes(prefill_sizes=(8, 24), batches=(1, 2), contexts=(8,), decode_steps=2,
                        mixed_chunk=4, repeats=2)
    config = cal.probe_config(cal.engine_config_for("fcfs", {"dtype": "float32", **TINY_FIELDS,
                                                             "multistep": 2}), probes)
    engine, recorder = cal.real_engine(tiny_llama_dir, config)
    samples = cal.measure_steps(engine, recorder, probes)
    shapes = {s.chunks for s in samples}
    assert ((8, 8),) in shapes and ((24, 24),) in shapes and ((8, 8), (8, 8)) in shapes
    assert ((1, 9), (4, 4)) in shapes  # a decode with the late prefill chunk beside it
    assert len({(s.chunks, s.new_round) for s in samples}) == len(samples)
    assert all(s.seconds > 0 for s in samples)
    bandwidth, latency = cal.measure_swaps(engine)
    assert bandwidth > 0 and latency >= 0
    engine.check_integrity()
    assert not engine.has_unfinished_calls() and not engine.calls


def test_comparison_reports_errors_against_the_real_run():
    from bench.simulate import ProgramResult, SimResult

    def result(finish_a, finish_b):
        return SimResult("atlas", "p", "m", [ProgramResult("A", "w", 1.0, finish_a, 10, 2),
                                             ProgramResult("B", "w", 2.0, finish_b, 5, 1)],
                         call_finish={"A/0": 2.0, "A/1": finish_a, "B/0": finish_b},
                         call_start={"A/0": 1.0, "A/1": 2.0, "B/0": 2.0})

    c = cal.comparison(result(5.0, 4.0), result(5.4, 3.0))
    assert [round(p["error_pct"], 6) for p in c["programs"]] == [10.0, -50.0]
    real_mean = (4.0 / 10 + 2.0 / 5) / 2
    sim_mean = (4.4 / 10 + 1.0 / 5) / 2
    assert c["mean_norm_latency"]["error_pct"] == pytest.approx(100 * (sim_mean / real_mean - 1))
    assert c["peak_active_calls"] == {"real": 2, "sim": 2}
    assert "mean normalized latency" in cal.format_comparison(c)


# ----- the command line ---------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--scale", "0.5"], "must be >= 1"),
    (["--programs", "0"], "must be >= 1"),
    (["--rate", "-1"], "must be > 0"),
    (["--policies", "atlas,oracle"], "simulation-only"),
    (["--policies", "nope"], "comma-separated list"),
    (["--model-dir", "/nonexistent/model"], "not a model directory"),
])
def test_calibrate_cli_rejects_bad_arguments(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["calibrate", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_calibrate_cli_defaults():
    args = build_parser().parse_args(["calibrate"])
    assert (args.programs, args.scale, args.max_calls, args.policies, args.threads) == (
        12, 16.0, 8, ["atlas", "optimized"], 1)
    assert (args.rate, args.max_num_seqs, args.calibration) == (0.25, 4, None)
    assert args.out.endswith("calibration_cpu.json")
