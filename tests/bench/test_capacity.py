import math

import pytest

import bench.capacity as cap_mod
from bench import cli
from bench.capacity import find_capacities, points_table, retimed, search
from bench.sweep import SweepPoint, capacity
from bench.trace import Trace, TraceCall, TraceProgram


def point(rate, mean, policy="atlas", done=3):
    return SweepPoint("mixed", policy, rate, 3, done, mean, 2 * mean, 3 * mean, 10.0 * rate,
                      5.0, 0.1)


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


def test_find_capacities_runs_every_policy_on_the_retimed_trace(monkeypatch):
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
    points = find_capacities("mixed", ["vllm", "atlas"], 0.16, 3, 7, start_rate=1.0,
                             iterations=2, progress=False)
    assert generated == [("mixed", 3, 7, 1.0)]  # one trace for everything
    assert all(arrival == pytest.approx(3.0 / rate) for _, rate, arrival in runs)
    assert capacity(points, "vllm", 0.16) == pytest.approx(2.0)
    assert capacity(points, "atlas", 0.16) == pytest.approx(4.0)


def test_points_table_rows_sorted_by_policy_then_rate():
    text = points_table([point(2.0, 0.5, "atlas"), point(1.0, 0.25, "atlas"),
                         point(1.0, 0.5, "vllm", done=2)])
    rows = [line for line in text.splitlines()[2:]]
    assert rows == ["| atlas | 1 | 0.2500 | 0.5000 | 0.7500 | 10 | 3/3 | 0.1 |",
                    "| atlas | 2 | 0.5000 | 1.0000 | 1.5000 | 20 | 3/3 | 0.1 |",
                    "| vllm | 1 | 0.5000 | 1.0000 | 1.5000 | 10 | 2/3 | 0.1 |"]


def test_cli_capacity_writes_the_table_and_plot(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cap_mod, "generate_trace", lambda w, n, seed, rate: Trace(()))
    monkeypatch.setattr(cap_mod, "run_point",
                        lambda workload, trace, policy, rate, preset, model: quadratic(rate, policy))
    cli.main(["capacity", "--workload", "mixed", "--policies", "atlas", "--programs", "3",
              "--target", "0.16", "--iterations", "1", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert "| atlas | 4 |" in out
    text = (tmp_path / "capacity_mixed.md").read_text()
    assert "agentix bench capacity --workload mixed" in text
    assert "Latency target: 0.1600 s/token (given)" in text
    assert (tmp_path / "capacity_mixed.png").read_bytes()[:4] == b"\x89PNG"
