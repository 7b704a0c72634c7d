import math

import pytest

import bench.analysis.sweep as sweep_mod
from bench import cli
from bench.analysis.sweep import SweepPoint, capacity, latency_target, run_point, sweep
from bench.analysis.sweep_report import capacity_table, latency_table, write_sweep
from bench.sim.simulate import ProgramResult, SimResult
from bench.sim.trace import Trace, TraceCall, TraceProgram


def point(policy, rate, mean, p95=None, p99=None, done=5, n=5, workload="lats"):
    return SweepPoint(workload=workload, policy=policy, rate=rate, num_programs=n,
                      programs_completed=done, mean_norm_latency=mean,
                      p95_norm_latency=mean * 2 if p95 is None else p95,
                      p99_norm_latency=mean * 3 if p99 is None else p99,
                      throughput_tokens_per_s=100.0 * rate, makespan_s=10.0,
                      ttft_p50_s=10 * mean, ttft_p99_s=20 * mean,
                      prefill_tokens_computed=round(10_000 * mean), num_preemptions=3,
                      sim_wall_seconds=0.1)


# ----- capacity ----------------------------------------------------------------------------------
def test_capacity_interpolates_the_crossing_in_log_log():
    points = [point("atlas", r, m) for r, m in [(0.4, 0.5), (0.1, 0.01), (0.2, 0.05)]]
    # 0.2 meets (0.05), 0.4 misses (0.5): log(0.1/0.05) / log(0.5/0.05) = log10(2) of the
    # way from 0.2 to 0.4 in log(rate): 0.2 * 2 ** 0.30103 = 0.24640.
    assert capacity(points, "atlas", 0.1) == pytest.approx(0.2464047, abs=1e-6)
    assert capacity(points, "atlas", 1.0) == 0.4  # every rate meets: the highest
    assert capacity(points, "atlas", 0.05) == pytest.approx(0.2)  # equal to the target meets


def test_capacity_non_monotone_stops_at_the_first_failure():
    points = [point("las", 0.1, 0.01), point("las", 0.2, 0.5), point("las", 0.4, 0.02)]
    # 0.1 * 2 ** (log(10) / log(50))
    assert capacity(points, "las", 0.1) == pytest.approx(0.1503778, abs=1e-6)


def test_capacity_none_when_the_lowest_rate_fails_or_policy_missing():
    points = [point("vllm", 0.1, 0.5), point("vllm", 0.2, 0.01)]
    assert capacity(points, "vllm", 0.1) is None
    assert capacity(points, "atlas", 0.1) is None


def test_capacity_does_not_interpolate_towards_an_incomplete_run():
    points = [point("mlfq", 0.1, 0.01), point("mlfq", 0.2, 0.5, done=3)]
    assert capacity(points, "mlfq", 0.1) == 0.1


# ----- tables ------------------------------------------------------------------------------------
def sample_points():
    latencies = {"vllm": (0.01, 0.2, 0.9), "optimized": (0.01, 0.05, 0.5),
                 "mlfq": (0.01, 0.03, 0.5), "atlas": (0.01, 0.02, 0.04),
                 "oracle": (0.01, 0.01, 0.02)}
    return [point(pol, rate, mean) for pol, means in latencies.items()
            for rate, mean in zip((0.1, 0.2, 0.4), means)]


def test_capacity_table_ratios_and_oracle_gap():
    text = capacity_table(sample_points(), target=0.1)
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in text.splitlines() if line.startswith("| ") and "policy" not in line}
    # vllm crosses at 0.1 * 2 ** (log 10 / log 20) = 0.17036, optimized at 0.24640 and
    # mlfq at 0.2 * 2 ** (log(0.1/0.03) / log(0.5/0.03)) = 0.26906; atlas never misses.
    assert lines["vllm"] == ["0.17", "1.00x", "0.69x", "0.63x"]
    assert lines["optimized"] == ["0.246", "1.45x", "1.00x", "0.92x"]
    assert lines["mlfq"] == ["0.269", "1.58x", "1.09x", "1.00x"]
    assert lines["atlas"] == ["0.4*", "2.35x", "1.62x", "1.49x"]
    assert lines["oracle"] == ["0.4*", "2.35x", "1.62x", "1.49x"]
    assert "oracle capacity / atlas capacity): 1.00x" in text
    assert "may be higher" in text


def test_capacity_table_has_a_ratio_column_per_baseline_run():
    latencies = {"atlas": (0.01, 0.02), "atlas-lru": (0.01, 0.5), "optimized-mem": (0.5, 0.9),
                 "mlfq": (0.01, 0.5), "optimized": (0.5, 0.9), "vllm": (0.5, 0.9)}
    points = [point(pol, rate, mean) for pol, means in latencies.items()
              for rate, mean in zip((0.1, 0.2), means)]
    text = capacity_table(points, target=0.1)
    assert "| policy | capacity (programs/s) | vs vllm | vs optimized | vs optimized-mem | " \
           "vs mlfq | vs atlas-lru |" in text
    # atlas-lru and mlfq cross at 0.1 * 2 ** (log 10 / log 50) = 0.15038.
    assert "| atlas | 0.2* | > 2.00x | > 2.00x | > 2.00x | 1.33x | 1.33x |" in text
    assert "| atlas-lru | 0.15 | > 1.50x | > 1.50x | > 1.50x | 1.00x | 1.00x |" in text


def test_capacity_table_none_and_missing_baselines():
    points = [point("atlas", 0.1, 0.5), point("atlas", 0.2, 0.5),
              point("las", 0.1, 0.01), point("las", 0.2, 0.5)]
    text = capacity_table(points, target=0.1)
    assert "| atlas | < 0.1 |" in text
    assert "| las | 0.15 |" in text
    assert "vs vllm" not in text
    assert "needs both oracle and atlas" in text
    assert "may be higher" not in text


def test_capacity_ratio_to_a_baseline_that_always_missed_is_a_lower_bound():
    points = [point("vllm", 0.1, 0.5), point("vllm", 0.2, 0.9),
              point("atlas", 0.1, 0.01), point("atlas", 0.2, 0.02)]
    text = capacity_table(points, target=0.1)
    assert "| vllm | < 0.1 | - |" in text
    assert "| atlas | 0.2* | > 2.00x |" in text


def test_no_capacity_for_an_offline_run():
    text = capacity_table([point("atlas", math.inf, 0.5), point("vllm", math.inf, 0.9)], 0.1)
    assert text == "Capacity: not defined for an offline run (every program arrives at once)\n"


def test_latency_table_cells():
    points = [point("vllm", 0.1, 0.01, 0.02, 0.03), point("vllm", 0.2, 0.1, 0.2, 0.3, done=4),
              point("atlas", 0.1, 0.005, 0.006, 0.007)]
    text = latency_table(points)
    assert "| policy | 0.1/s | 0.2/s |" in text
    assert "| vllm | 0.0100 / 0.0200 / 0.0300 | 0.1000 / 0.2000 / 0.3000 (4/5 done) |" in text
    assert "| atlas | 0.0050 / 0.0060 / 0.0070 | - |" in text
    assert "| vllm | 10.0 | 20.0 (4/5 done) |" in text
    assert "| vllm | 10.0 | 10.0 (4/5 done) |" in text.split("Makespan")[1]
    ttft = text.split("Time to first token of a call (s), P50 / P99")[1]
    assert ttft.splitlines()[4:7] == ["| vllm | 0.100 / 0.200 | 1.000 / 2.000 (4/5 done) |",
                                      "| atlas | 0.050 / 0.100 | - |", ""]
    prefill = text.split("Prefill tokens computed")[1]
    assert prefill.splitlines()[4:] == ["| vllm | 100 | 1000 (4/5 done) |", "| atlas | 50 | - |"]


# ----- files -------------------------------------------------------------------------------------
def test_write_sweep(tmp_path):
    md, png = write_sweep(sample_points(), 0.1, tmp_path / "out", command="agentix bench sweep x")
    assert md == tmp_path / "out" / "sweep_lats.md"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = md.read_text()
    assert "agentix bench sweep x" in text
    assert "Latency target: 0.1000" in text
    assert "| atlas | 0.0100 / 0.0200 / 0.0300 |" in text
    assert "Capacity" in text


def test_write_sweep_rejects_mixed_workloads(tmp_path):
    with pytest.raises(ValueError):
        write_sweep([point("a", 0.1, 0.1), point("a", 0.2, 0.1, workload="bfcl")], 1.0, tmp_path)


# ----- sweep with a fake simulator --------------------------------------------------------------
def tiny_trace(rate):
    programs = tuple(TraceProgram(f"p{i}", i / rate, (TraceCall("c", 10, 4),), "test")
                     for i in range(3))
    return Trace(programs)


@pytest.fixture
def fake_sim(monkeypatch):
    calls = {"generate": [], "simulate": []}

    def fake_generate(workload, num_programs, seed, rate):
        calls["generate"].append((workload, num_programs, seed, rate))
        return tiny_trace(rate)

    def fake_simulate(trace, policy, preset="a100-80g", model="llama-3.1-8b", stop=None,
                      engine_overrides=None):
        """Each program: one call added at its arrival, its first token `slow` s later and 4
        tokens at `4 * slow`; 10 prompt tokens and 3 decodes computed per call."""
        assert engine_overrides is None  # sweeps and finite traces set no engine field
        calls["simulate"].append((id(trace), policy, preset, model))
        slow = {"vllm": 2.0, "atlas": 1.0}.get(policy, 1.5)
        programs = [ProgramResult(p.program_id, "test", p.arrival, p.arrival + slow * 4, 4, 1)
                    for p in trace.programs]
        keys = [f"{p.program_id}/c" for p in trace.programs]
        return SimResult(
            policy=policy, preset=preset, model=model, programs=programs,
            call_finish={k: p.finish for k, p in zip(keys, programs)},
            call_start={k: p.arrival for k, p in zip(keys, programs)},
            call_first_token={k: p.arrival + slow * (1 + i) for i, (k, p)
                              in enumerate(zip(keys, programs))},
            num_tokens_computed=13 * len(programs), num_preemptions=2, wall_seconds=0.01)

    monkeypatch.setattr(sweep_mod, "generate_trace", fake_generate)
    monkeypatch.setattr(sweep_mod, "simulate", fake_simulate)
    return calls


def test_sweep_reuses_one_trace_per_rate(fake_sim):
    points = sweep("lats", ["vllm", "atlas"], [0.1, 0.2], 3, 7, "h100", "llama-3.1-8b",
                   progress=False)
    assert fake_sim["generate"] == [("lats", 3, 7, 0.1), ("lats", 3, 7, 0.2)]
    ids = [c[0] for c in fake_sim["simulate"]]
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]
    assert [(p.policy, p.rate) for p in points] == [("vllm", 0.1), ("atlas", 0.1),
                                                     ("vllm", 0.2), ("atlas", 0.2)]
    assert points[0].mean_norm_latency == pytest.approx(2.0)
    assert points[1].mean_norm_latency == pytest.approx(1.0)
    assert all(p.programs_completed == p.num_programs == 3 for p in points)


def test_run_point_summarizes_one_run(fake_sim):
    got = run_point("lats", tiny_trace(0.1), "vllm", 0.1)
    assert got == SweepPoint(
        workload="lats", policy="vllm", rate=0.1, num_programs=3, programs_completed=3,
        mean_norm_latency=2.0, p95_norm_latency=2.0, p99_norm_latency=2.0,
        throughput_tokens_per_s=12 / 28, makespan_s=28.0,
        ttft_p50_s=4.0, ttft_p99_s=pytest.approx(5.96),  # TTFTs 2, 4, 6
        prefill_tokens_computed=30, num_preemptions=2, sim_wall_seconds=0.01)


def test_progress_bar_on_and_off(fake_sim, capsys):
    sweep("lats", ["vllm"], [0.1, 0.2], 3, 0, progress=False)
    assert "sweep lats" not in capsys.readouterr().err
    sweep("lats", ["vllm"], [0.1, 0.2], 3, 0, progress=True)
    err = capsys.readouterr().err
    assert "sweep lats" in err and "2/2" in err


def test_latency_target_is_factor_times_unloaded_vllm(fake_sim):
    target = latency_target("lats", "a100-80g", "llama-3.1-8b", 0, 100)
    assert target == pytest.approx(sweep_mod.TARGET_FACTOR * 2.0)
    (workload, n, seed, rate), = fake_sim["generate"]
    assert rate == sweep_mod.UNLOADED_RATE and n <= sweep_mod.TARGET_PROGRAMS
    assert fake_sim["simulate"][0][1] == "vllm"


def test_cli_sweep(fake_sim, tmp_path, capsys):
    cli.main(["sweep", "--workload", "lats", "--policies", "vllm,atlas", "--rates", "0.2,0.1",
              "--programs", "3", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert "latency target 10.0000 s/token" in out
    assert "| vllm | 0.2* | 1.00x |" in out  # target 10 s/token: both meet every rate
    assert "| atlas | 0.2* | 1.00x |" in out
    assert (tmp_path / "sweep_lats.md").exists() and (tmp_path / "sweep_lats.png").exists()
    assert "--policies vllm,atlas" in (tmp_path / "sweep_lats.md").read_text()


def test_cli_rejects_unknown_policy_and_bad_rates():
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sweep", "--workload", "lats", "--policies", "vllm,nope"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sweep", "--workload", "lats", "--rates", "0.1,-1"])


def test_cli_sweep_takes_jobs_in_bounds(capsys):
    assert cli.build_parser().parse_args(["sweep", "--workload", "lats", "--jobs", "2"]).jobs == 2
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sweep", "--workload", "lats", "--jobs", "0"])
    assert "jobs: must be in [1, 64], got 0" in capsys.readouterr().err


# ----- one real, tiny sweep -----------------------------------------------------------------------
def test_real_tiny_sweep(tmp_path):
    points = sweep("lats", ["vllm", "atlas"], [0.5, 2.0], 3, 0, progress=False)
    assert len(points) == 4
    assert all(p.programs_completed == 3 and p.mean_norm_latency > 0 for p in points)
    at_once = sweep("lats", ["vllm", "atlas"], [0.5, 2.0], 3, 0, progress=False, jobs=2)
    assert [{**p.to_dict(), "sim_wall_seconds": 0} for p in at_once] == \
        [{**p.to_dict(), "sim_wall_seconds": 0} for p in points]
    md, png = write_sweep(points, 1.0, tmp_path)
    assert png.stat().st_size > 0
