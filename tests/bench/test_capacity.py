import math

import pytest

import bench.analysis.capacity as cap_mod
from bench import cli
from bench.analysis.capacity import (LatencyTarget, find_capacities, memoized, retimed, search,
                                     write_outputs)
from bench.analysis.sweep import SweepPoint, capacity
from bench.analysis.sweep_report import points_table
from bench.sim.trace import Trace, TraceCall, TraceProgram


def point(rate, mean, policy="atlas", done=3):
    return SweepPoint("mixed", policy, rate, 3, done, mean, 2 * mean, 3 * mean, 10.0 * rate,
                      5.0, 0.5 * rate, rate, 100 * round(rate), 2, 0.1)


def quadratic(rate, policy="atlas"):
    """Mean latency 0.01 * rate^2: crosses a target of 0.16 at exactly rate 4."""
    return point(rate, 0.01 * rate * rate, policy)


def test_retimed_scales_every_arrival():
    trace = Trace(tuple(TraceProgram(f"p{i}", a, (TraceCall("c", 4, 2),), "t")
                        for i, a in enumerate((0.5, 1.25, 3.0))))
    assert [p.arrival for p in retimed(trace, 4.0).programs] == [0.125, 0.3125, 0.75]
    assert retimed(trace, 4.0).programs[0].calls == trace.programs[0].calls
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="rate"):
            retimed(trace, bad)


def test_search_brackets_by_doubling_then_bisects():
    rates = [p.rate for p in search(quadratic, 0.16, start_rate=1.0, iterations=3)]
    # 1, 2, 4 meet (4 exactly), 8 misses; then sqrt(4 * 8), ... towards 4.
    assert rates[:4] == [1.0, 2.0, 4.0, 8.0]
    assert rates[4:] == pytest.approx([math.sqrt(32), 32 ** 0.25 * 2, 4 * 2 ** (1 / 8)])
    points = search(quadratic, 0.16, start_rate=1.0, iterations=3)
    assert capacity(points, "atlas", 0.16) == pytest.approx(4.0)


def test_search_halves_when_the_start_misses():
    rates = [p.rate for p in search(quadratic, 0.16, start_rate=16.0, iterations=1)]
    assert rates == [16.0, 8.0, 4.0, pytest.approx(math.sqrt(32))]


def test_search_gives_up_without_a_bracket():
    points = search(lambda r: point(r, 1.0), 0.16, start_rate=1.0, max_expansions=3)
    assert [p.rate for p in points] == [1.0, 0.5, 0.25, 0.125]
    assert capacity(points, "atlas", 0.16) is None
    with pytest.raises(ValueError, match="start_rate"):
        search(quadratic, 0.16, start_rate=0.0)


@pytest.fixture
def fake_runs(monkeypatch):
    """`run_point` replaced by `quadratic` (vllm 4x slower than atlas); every run listed."""
    base = Trace(tuple(TraceProgram(f"p{i}", float(i + 1), (TraceCall("c", 4, 2),), "t")
                       for i in range(3)))
    generated, runs = [], []
    monkeypatch.setattr(cap_mod, "generate_trace",
                        lambda w, n, seed, rate: generated.append((w, n, seed, rate)) or base)

    def fake_run_point(workload, trace, policy, rate, preset, model):
        runs.append((policy, rate, trace.programs[2].arrival))
        slow = {"vllm": 4.0, "atlas": 1.0}[policy]
        return point(rate, 0.01 * slow * rate * rate, policy)

    monkeypatch.setattr(cap_mod, "run_point", fake_run_point)
    return generated, runs


def test_find_capacities_runs_every_policy_on_the_retimed_trace(fake_runs):
    generated, runs = fake_runs
    points = find_capacities("mixed", ["vllm", "atlas"], [0.16], 3, 7, start_rate=1.0,
                             iterations=2, progress=False)
    assert generated == [("mixed", 3, 7, 1.0)]  # one trace for everything
    assert all(arrival == pytest.approx(3.0 / rate) for _, rate, arrival in runs)
    assert [(p.policy, p.rate) for p in points] == [(policy, rate) for policy, rate, _ in runs]
    assert capacity(points, "vllm", 0.16) == pytest.approx(2.0)
    assert capacity(points, "atlas", 0.16) == pytest.approx(4.0)


def test_the_second_target_reuses_every_rate_already_run(fake_runs):
    _, runs = fake_runs
    points = find_capacities("mixed", ["atlas"], [0.16, 0.64], 3, 7, start_rate=1.0,
                             iterations=1, progress=False)
    # 0.16: 1, 2, 4 meet, 8 misses, bisect at sqrt(32). 0.64 (crossing at 8): 1, 2, 4 and 8
    # again (memoized: 8 meets it), 16 misses, bisect at sqrt(128).
    assert [rate for _, rate, _ in runs] == pytest.approx(
        [1.0, 2.0, 4.0, 8.0, math.sqrt(32), 16.0, math.sqrt(128)])
    assert len({rate for _, rate, _ in runs}) == len(runs) == len(points)
    assert capacity(points, "atlas", 0.16) == pytest.approx(4.0)
    assert capacity(points, "atlas", 0.64) == pytest.approx(8.0)


def test_memoized_runs_each_rate_once():
    rates = []
    run = memoized(lambda r: rates.append(r) or quadratic(r))
    first = run(2.0)
    assert run(2.0) is first and run(4.0).rate == 4.0
    assert rates == [2.0, 4.0]


def test_points_table_rows_sorted_by_policy_then_rate():
    text = points_table([point(2.0, 0.5, "atlas"), point(1.0, 0.25, "atlas"),
                         point(1.0, 0.5, "vllm", done=2)])
    assert text.splitlines()[0] == (
        "| policy | rate (programs/s) | mean | P95 | P99 | TTFT P50 (s) | TTFT P99 (s) | "
        "throughput (tokens/s) | prefill tokens | preemptions | completed | sim seconds |")
    assert text.splitlines()[2:] == [
        "| atlas | 1 | 0.2500 | 0.5000 | 0.7500 | 0.500 | 1.000 | 10 | 100 | 2 | 3/3 | 0.1 |",
        "| atlas | 2 | 0.5000 | 1.0000 | 1.5000 | 1.000 | 2.000 | 20 | 200 | 2 | 3/3 | 0.1 |",
        "| vllm | 1 | 0.5000 | 1.0000 | 1.5000 | 0.500 | 1.000 | 10 | 100 | 2 | 2/3 | 0.1 |"]


def test_write_outputs_has_a_capacity_table_per_target(tmp_path):
    points = [quadratic(r) for r in (1.0, 2.0, 4.0, 8.0, 16.0)]
    targets = [LatencyTarget(0.16, "given"), LatencyTarget(0.64, "fixed")]
    md, png = write_outputs(points, targets, tmp_path, "agentix bench capacity x")
    text = md.read_text()
    assert "Latency targets: 0.1600 s/token (given); 0.6400 s/token (fixed)" in text
    first, second = text.split("## Target 0.1600 s/token (given)")[1].split(
        "## Target 0.6400 s/token (fixed)")
    assert "| atlas | 4 |" in first and "reaches 0.1600 s/token" in first
    second, every_run = second.split("## Every run (latencies in s/token)")
    assert "| atlas | 8 |" in second and "reaches 0.6400 s/token" in second
    assert len(every_run.strip().splitlines()) == 2 + 5
    assert png.read_bytes()[:4] == b"\x89PNG"


def cli_capacity(monkeypatch, tmp_path, *extra):
    rates = []
    monkeypatch.setattr(cap_mod, "generate_trace", lambda w, n, seed, rate: Trace(()))
    monkeypatch.setattr(cap_mod, "run_point", lambda workload, trace, policy, rate, preset,
                        model: rates.append(rate) or quadratic(rate, policy))
    cli.main(["capacity", "--finite-trace", "--workload", "mixed", "--policies", "atlas",
              "--programs", "3", "--target", "0.16", "--iterations", "1", "--out",
              str(tmp_path), "--no-progress", *extra])
    return rates, (tmp_path / "capacity_mixed.md").read_text()


def test_cli_capacity_searches_both_targets(monkeypatch, tmp_path, capsys):
    rates, text = cli_capacity(monkeypatch, tmp_path)  # the fixed target: 0.3 by default
    out = capsys.readouterr().out
    assert "latency targets 0.1600 s/token (given); 0.3000 s/token (fixed)" in out
    assert "| atlas | 4 |" in out
    # 0.3 s/token: 1, 2, 4 meet, 8 misses (memoized), bisect at sqrt(32) (memoized too).
    assert rates == pytest.approx([1.0, 2.0, 4.0, 8.0, math.sqrt(32)])
    assert "| atlas | 5.48 |" in out  # 0.01 r^2 = 0.3 at r = sqrt(30), from 5.66 and 4
    assert "agentix bench capacity --finite-trace --workload mixed" in text
    assert "Latency targets: 0.1600 s/token (given); 0.3000 s/token (fixed)" in text
    assert "## Target 0.3000 s/token (fixed)" in text
    assert (tmp_path / "capacity_mixed.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_capacity_fixed_target_zero_searches_one(monkeypatch, tmp_path, capsys):
    rates, text = cli_capacity(monkeypatch, tmp_path, "--fixed-target", "0")
    assert "Latency targets: 0.1600 s/token (given)\n" in text
    assert "(fixed)" not in text and "(fixed)" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["capacity", "--workload", "mixed", "--fixed-target",
                                       "-1"])


def test_cli_capacity_max_expansions_zero_runs_the_start_rate_alone(monkeypatch, tmp_path):
    rates, text = cli_capacity(monkeypatch, tmp_path, "--fixed-target", "0",
                               "--max-expansions", "0", "--iterations", "0")
    assert rates == [1.0]
    assert "--max-expansions 0" in text
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["capacity", "--workload", "mixed", "--max-expansions",
                                       "-1"])


def test_search_with_no_expansions_runs_only_the_start():
    assert [p.rate for p in search(quadratic, 0.16, 2.0, iterations=3, max_expansions=0)] == [2.0]


def test_searches_in_worker_processes_find_the_points_found_one_at_a_time():
    def figures(points):  # all but the wall clock, which depends on the machine
        return [{**p.to_dict(), "sim_wall_seconds": 0} for p in points]

    args = ("lats", ["vllm", "atlas"], [0.05], 3, 0)
    kwargs = dict(start_rate=0.5, iterations=1, max_expansions=2, progress=False)
    alone = find_capacities(*args, **kwargs)
    assert len(alone) >= 4 and {p.policy for p in alone} == {"vllm", "atlas"}
    assert figures(find_capacities(*args, jobs=2, **kwargs)) == figures(alone)


def test_cli_capacity_takes_jobs_in_bounds(capsys):
    parsed = cli.build_parser().parse_args(["capacity", "--workload", "lats", "--jobs", "3"])
    assert parsed.jobs == 3
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["capacity", "--workload", "lats", "--jobs", "65"])
    assert "jobs: must be in [1, 64], got 65" in capsys.readouterr().err
