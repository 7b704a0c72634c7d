import pytest

from bench.cli import build_parser
from bench.sim.cost_model import MODEL_PRESETS
from bench.sim.simulate import engine_config_for
from bench.support import calibrate as cal
from bench.support.real_run import real_engine

PROBE_FIELDS = dict(block_size=8, num_kv_blocks=64, num_host_blocks=64, max_num_seqs=4,
                    max_num_batched_tokens=64, multistep=2)


def test_calibration_round_trips_through_json(tmp_path):
    model = MODEL_PRESETS["llama-3.1-8b"]
    fit = cal.Fit(60e9, 12e9, 0.03, 0.002, 0.1, 0.2, 40)
    calibration = cal.Calibration(model, fit, 4e9, 1e-5, 1, "/somewhere", 12.0)
    path = tmp_path / "c.json"
    cal.save_calibration(calibration, path, {"checks": []})
    again = cal.load_calibration(path)
    assert again == calibration
    chunks = [(1, 100), (1, 30), (200, 260)]
    assert again.cost_model().step_seconds(chunks) == calibration.cost_model().step_seconds(chunks)
    assert again.cost_model().swap_seconds(3, 1000) == pytest.approx(3000 / 4e9 + 1e-5)


def test_probes_and_swaps_measure_the_tiny_model(tiny_llama_dir):
    probes = cal.Probes(prefill_sizes=(8, 24), batches=(1, 2), contexts=(8,), decode_steps=2,
                        mixed_chunk=4, repeats=2)
    config = cal.probe_config(engine_config_for("fcfs", {"dtype": "float32", **PROBE_FIELDS}),
                              probes)
    engine, recorder = real_engine(tiny_llama_dir, config)
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
