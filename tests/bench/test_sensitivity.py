import pytest

import bench.analysis.sensitivity as sens
from bench import cli
from bench.analysis.sensitivity import (KnobPoint, default_value, knob_tables, run_knobs,
                                        write_outputs)
from bench.sim.trace import Trace, TraceCall, TraceProgram


def two_program_trace(workload, num_programs, seed, rate):
    calls = (TraceCall("a", 40, 6), TraceCall("b", 20, 5, ("a",), 0.1))
    return Trace(tuple(TraceProgram(f"p{i}", i * 0.01, calls, "test") for i in range(2)))


@pytest.fixture
def tiny_trace(monkeypatch):
    monkeypatch.setattr(sens, "generate_trace", two_program_trace)


def test_defaults_come_from_the_baseline_then_the_engine():
    assert default_value("atlas", "multistep") == 4  # the benchmark baseline's
    assert default_value("atlas", "num_queues") == 8  # the engine's
    assert default_value("atlas", "starvation_beta") == 4.0
    assert default_value("atlas", "quantum_steps") == 64
    assert default_value("atlas", "program_service_halflife") is None  # off


def test_each_value_reaches_the_engine_with_its_type(tiny_trace, monkeypatch):
    seen = []
    real_simulate = sens.simulate

    def spy(trace, policy, preset, model, engine_overrides):
        seen.append((policy, engine_overrides))
        return real_simulate(trace, policy, preset=preset, model=model,
                             engine_overrides=engine_overrides)

    monkeypatch.setattr(sens, "simulate", spy)
    points = run_knobs("mixed", 1.0, 2, knobs={"multistep": (1, 4), "starvation_beta": (0, 4),
                                               "program_service_halflife": (0, 30)},
                       progress=False)
    assert seen == [("atlas", {"multistep": 1}), ("atlas", {"multistep": 4}),
                    ("atlas", {"starvation_beta": 0.0}), ("atlas", {"starvation_beta": 4.0}),
                    ("atlas", {"program_service_halflife": None}),
                    ("atlas", {"program_service_halflife": 30.0})]
    assert [type(o["multistep"]) for _, o in seen[:2]] == [int, int]
    assert type(seen[5][1]["program_service_halflife"]) is float
    assert [(p.knob, p.value, p.is_default) for p in points] == [
        ("multistep", 1, False), ("multistep", 4, True),
        ("starvation_beta", 0, False), ("starvation_beta", 4, True),
        ("program_service_halflife", 0, True), ("program_service_halflife", 30, False)]
    assert all(p.programs_completed == 2 for p in points)


def test_program_service_halflife_is_swept_with_zero_for_off():
    assert sens.KNOBS["program_service_halflife"] == (0, 30, 120, 600)


def test_a_knob_that_cannot_matter_changes_nothing(tiny_trace):
    # Two small programs never compete for seats or memory: the queue count is irrelevant.
    points = run_knobs("mixed", 1.0, 2, knobs={"num_queues": (1, 8)}, progress=False)
    assert points[0].mean_norm_latency == points[1].mean_norm_latency > 0
    assert points[0].num_preemptions == points[1].num_preemptions == 0


def test_unknown_knob_or_policy_is_rejected(tiny_trace):
    with pytest.raises(ValueError, match="knobs: unknown"):
        run_knobs("mixed", 1.0, 2, knobs={"block_size": (16,)}, progress=False)
    with pytest.raises(ValueError, match="policy must be one of"):
        run_knobs("mixed", 1.0, 2, policy="srpt", progress=False)


def point(knob, value, mean, default=False):
    return KnobPoint(knob, value, default, 3, mean, 2 * mean, 3 * mean, 100.0, 7, 0.1)


def test_knob_tables_mark_the_default():
    text = knob_tables([point("multistep", 1, 0.5), point("multistep", 4, 0.25, True)])
    assert text.splitlines() == [
        "### multistep", "",
        "| value | mean | P95 | P99 | throughput (tokens/s) | preemptions |",
        "| --- | --- | --- | --- | --- | --- |",
        "| 1 | 0.5000 | 1.0000 | 1.5000 | 100.0 | 7 |",
        "| 4 (default) | 0.2500 | 0.5000 | 0.7500 | 100.0 | 7 |",
    ]


def test_write_outputs(tmp_path):
    points = [point("multistep", 1, 0.5), point("multistep", 4, 0.25, True),
              point("num_queues", 8, 0.3, True)]
    md, png = write_outputs(points, "mixed", tmp_path, "header line")
    assert md.name == "sensitivity_mixed.md" and png.stat().st_size > 0
    assert "header line" in md.read_text() and "### num_queues" in md.read_text()


def test_cli_accepts_the_half_life_knob():
    args = cli.build_parser().parse_args(["sensitivity", "--workload", "mixed", "--rate", "1",
                                          "--knobs", "program_service_halflife,multistep"])
    assert args.knobs == ["program_service_halflife", "multistep"]


def test_cli_rejects_unknown_knob(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sensitivity", "--workload", "mixed", "--rate", "1", "--knobs",
                  "block_size"])
    assert "knobs must be a comma-separated list" in capsys.readouterr().err
