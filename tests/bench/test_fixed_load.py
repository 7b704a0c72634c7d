"""Fixed-load comparisons: the runs, the flat-backlog check, per-class figures, the paired
verdicts, the report and its REPORT rows (bench/analysis/fixed_load*.py,
bench/studies/fixed_load.py)."""

import json
import math

import pytest

import bench.analysis.fixed_load as fl
from bench.analysis.fixed_load import (ALL, ClassFigures, FixedLoadConfig, FixedRun,
                                       class_figures, is_flat, run_fixed_load)
from bench.analysis.fixed_load_report import (FixedLoadRuns, backlog_table, comparison_table,
                                              figures_table, markdown, verdict_summary)
from bench.analysis.seed_stats import interval
from bench.analysis.steady_state import (SteadyConfig, SteadyPoint, SteadyRun, TracePrefixes,
                                         Verdict, Window, measured_ids)
from bench.analysis.sweep import SweepPoint
from bench.report.records import load_studies
from bench.sim.simulate import ProgramResult, SimResult
from bench.studies import fixed_load as study

TINY = SteadyConfig(window_programs=12, max_backlog_growth=0.5, warmup_seconds=40.0,
                    tail_seconds=200.0)


def figures(mean, p99=None, ttft=None, programs=10):
    return ClassFigures(programs, mean, 2 * mean if p99 is None else p99,
                        10 * mean if ttft is None else ttft)


def run(seed, fraction, policy, mean, verdict="steady", growth=0.01, warm=True, **classes):
    steady = verdict == "steady"
    found = {ALL: figures(mean), **{k: figures(v) for k, v in classes.items()}} if steady else {}
    return FixedRun(seed, fraction, 2 * fraction, policy, verdict, growth, warm, 5.0,
                    steady and abs(growth) <= 0.1 and warm, found, 1.0)


# ----- config and the flat check ---------------------------------------------------------------
@pytest.mark.parametrize("fields, name", [
    (dict(knee=0.0), "knee"), (dict(knee=math.inf), "knee"),
    (dict(knee=1.0, fractions=()), "fractions"),
    (dict(knee=1.0, fractions=(0.5, 1.2)), "fractions"),
    (dict(knee=1.0, seeds=()), "seeds"), (dict(knee=1.0, seeds=(1, 1)), "seeds"),
    (dict(knee=1.0, flat_growth=0.0), "flat_growth")])
def test_config_rejects_bad_fields_by_name(fields, name):
    with pytest.raises(ValueError, match=name):
        FixedLoadConfig(**fields)


def test_loads_are_fractions_of_the_knee():
    config = FixedLoadConfig(2.0)
    assert config.fractions == (0.7, 0.85, 0.95) and config.seeds == (0, 1, 2)
    assert [config.rate(f) for f in config.fractions] == [1.4, 1.7, 1.9]


def test_flat_needs_steady_small_growth_and_a_long_warm_up():
    assert is_flat(Verdict.STEADY, 0.05, True, 0.1)
    assert is_flat(Verdict.STEADY, -0.1, True, 0.1)
    assert not is_flat(Verdict.STEADY, 0.11, True, 0.1)
    assert not is_flat(Verdict.STEADY, -0.2, True, 0.1)
    assert not is_flat(Verdict.STEADY, 0.0, False, 0.1)
    assert not is_flat(Verdict.BACKLOG, 0.0, True, 0.1)
    # Every measured program finished before the window's end: no growth to judge.
    assert not is_flat(Verdict.STEADY, math.nan, True, 0.1)


# ----- per-class figures -------------------------------------------------------------------------
def test_class_figures_split_mixed_by_component():
    programs = [ProgramResult("a", "lats", 0.0, 10.0, 10, 1),
                ProgramResult("b", "bfcl", 0.0, 4.0, 2, 1),
                ProgramResult("c", "lats", 0.0, 30.0, 10, 1),
                ProgramResult("x", "lats", 0.0, 99.0, 1, 1)]  # not measured
    result = SimResult("atlas", "a100-80g", "llama-3.1-8b", programs,
                       call_start={"a/0": 0.0, "b/0": 1.0, "c/0": 0.0, "x/0": 0.0},
                       call_first_token={"a/0": 0.5, "b/0": 3.0, "c/0": 1.5, "x/0": 50.0})
    got = class_figures(result, frozenset({"a", "b", "c"}))
    assert list(got) == [ALL, "bfcl", "lats"]
    assert got[ALL].programs == 3 and got[ALL].mean == pytest.approx((1 + 2 + 3) / 3)
    assert got["lats"].programs == 2 and got["lats"].mean == pytest.approx(2.0)
    assert got["bfcl"].ttft_p99 == pytest.approx(2.0)
    assert got["lats"].ttft_p99 == pytest.approx(0.5 + 0.99 * 1.0)
    # One class: "all" alone.
    assert list(class_figures(result, frozenset({"a", "c"}))) == [ALL]


def test_fixed_run_round_trips_through_json():
    one = run(0, 0.7, "defaults", 0.03, lats=0.02)
    assert FixedRun.from_dict(json.loads(json.dumps(one.to_dict()))) == one


# ----- the loop, with the simulator replaced ----------------------------------------------------
def test_every_seed_fraction_and_policy_runs_once_on_one_trace_per_seed(monkeypatch):
    calls, traces = [], []

    class Traces:
        def __init__(self, workload, seed, arrivals):
            traces.append(seed)

        def first(self, n):
            return f"trace of {n}"

    def fake_run(workload, base, seed, policy, rate, steady, preset, model, engine_overrides):
        calls.append((seed, rate, policy, base, engine_overrides))
        return _fake_steady(len(calls), policy)

    monkeypatch.setattr(fl, "TracePrefixes", Traces)
    monkeypatch.setattr(fl, "steady_run", fake_run)
    seen = []
    config = FixedLoadConfig(2.0, fractions=(0.5, 1.0), seeds=(3, 4), steady=TINY)
    runs = run_fixed_load("sharegpt", ["optimized", "defaults"], config,
                          engine_overrides={"num_kv_blocks": 100}, on_run=seen.append)
    assert traces == [3, 4]
    assert [(s, r, p) for s, r, p, _, _ in calls] == [
        (3, 1.0, "optimized"), (3, 1.0, "defaults"), (3, 2.0, "optimized"), (3, 2.0, "defaults"),
        (4, 1.0, "optimized"), (4, 1.0, "defaults"), (4, 2.0, "optimized"), (4, 2.0, "defaults")]
    assert calls[0][3] == f"trace of {TINY.total_programs(1.0)}"
    assert all(c[4] == {"num_kv_blocks": 100} for c in calls)
    assert seen == runs and [r.fraction for r in runs[:4]] == [0.5, 0.5, 1.0, 1.0]
    assert runs[0].classes == {} and not runs[0].flat  # the fake's overloaded run


def _fake_steady(n, policy):
    """The first run overloaded, the others steady, one measured program each."""
    verdict = Verdict.BACKLOG if n == 1 else Verdict.STEADY
    point = SweepPoint("sharegpt", policy, 1.0, 1, 1, 0.1, 0.2, 0.3, 1.0, 1.0, 0.1, 0.2, 0, 0,
                       0.5, verdict is not Verdict.STEADY)
    programs = [ProgramResult("p", "sharegpt", 0.0, 1.0, 10, 1)]
    result = SimResult(policy, "a100-80g", "llama-3.1-8b", programs, call_start={"p/0": 0.0},
                       call_first_token={"p/0": 0.25})
    steady = SteadyPoint(0, Window(40.0, 52.0), 1, 0.1, 0.1, 0.02, verdict, point, 5.0)
    return SteadyRun(steady, result, frozenset({"p"}))


def test_a_real_tiny_run_is_steady_and_flat_at_a_light_load():
    config = FixedLoadConfig(0.1, fractions=(0.5,), seeds=(0,), steady=TINY, flat_growth=0.5)
    runs = run_fixed_load("sharegpt", ["optimized", "defaults"], config)
    assert [(r.policy, r.verdict) for r in runs] == [("optimized", "steady"),
                                                     ("defaults", "steady")]
    base = TracePrefixes("sharegpt", 0).first(TINY.total_programs(0.05))
    measured = measured_ids(base, TINY.window(0.05, timed_at=1.0))
    assert all(r.rate == 0.05 and r.classes[ALL].programs == len(measured) > 6 for r in runs)
    assert all(r.classes[ALL].mean > 0 and r.classes[ALL].ttft_p99 > 0 for r in runs)


# ----- reports --------------------------------------------------------------------------------
@pytest.fixture
def runs():
    """defaults is 10% faster than optimized on every seed at 0.7, where optimized's seed 0
    run is not flat (its backlog grew by 0.15); at 0.95 optimized's seed 2 run is overloaded
    and defaults is 20% slower on seeds 0 and 1."""
    made = []
    for seed, base in ((0, 1.0), (1, 2.0), (2, 4.0)):
        made.append(run(seed, 0.7, "defaults", 0.9 * base, lats=0.9 * base, bfcl=base))
        made.append(run(seed, 0.7, "optimized", base, lats=base, bfcl=base,
                        growth=0.15 if seed == 0 else 0.01))
        made.append(run(seed, 0.95, "defaults", 1.2 * base, lats=base, bfcl=base,
                        growth=0.05 if seed == 1 else 0.0))
        made.append(run(seed, 0.95, "optimized", base, lats=base, bfcl=base,
                        **({"verdict": "backlog grows", "growth": 0.3} if seed == 2 else {})))
    return FixedLoadRuns(made)


def test_figures_are_intervals_over_the_flat_seeds(runs):
    got = runs.figure(0.95, "optimized", ALL, "mean")
    assert got == interval([1.0, 2.0])
    assert runs.figure(0.7, "optimized", ALL, "mean") == interval([2.0, 4.0])
    assert runs.figure(0.7, "defaults", "lats", "p99") == interval([1.8, 3.6, 7.2])
    table = figures_table(runs, ALL)
    assert "| 0.95 | optimized; seed 2: backlog grows |" in table
    assert "| 0.7 | optimized; seed 0: not flat |" in table


def test_comparisons_are_paired_over_seeds_both_ran_steady(runs):
    wins = runs.compare(0.7, "defaults", "optimized", ALL, "mean")
    assert wins.verdict == "wins" and wins.seeds == (1, 2)
    assert wins.ratio.mean == pytest.approx(0.9)
    loses = runs.compare(0.95, "defaults", "optimized", ALL, "ttft_p99")
    assert loses.verdict == "loses" and loses.seeds == (0, 1)
    tie = runs.compare(0.7, "defaults", "optimized", "bfcl", "mean")
    assert tie.verdict == "tie" and tie.ratio.mean == pytest.approx(1.0)
    summary = verdict_summary(runs, "defaults")
    assert "| optimized | 6 | 9 | 3 | 0 |" in summary
    assert ("- all, 0.95 x knee, mean normalized latency (s/token): 1.2 [1.2, 1.2] against "
            "optimized") in summary
    assert "**1.2 [1.2, 1.2] loses**" in comparison_table(runs, "defaults", ALL)


def test_backlog_table_marks_growth_warm_up_and_flat_runs(runs):
    table = backlog_table(runs)
    assert "| 0.95 | defaults | s0: +0.000, s1: +0.050, s2: +0.000 | 3/3 |" in table
    assert ("| 0.95 | optimized | s0: +0.010, s1: +0.010, s2: +0.300 (backlog grows) | 2/3 |"
            in table)
    assert "| 0.7 | optimized | s0: +0.150, s1: +0.010, s2: +0.010 | 2/3 |" in table
    text = markdown(runs, ["defaults"], "# head")
    assert text.startswith("# head\n") and "## Figures, class lats" in text


def test_study_report_writes_the_markdown_and_the_report_rows(runs, tmp_path, monkeypatch):
    saved = {"name": "unit", "workload": "mixed",
             "command": "python -m bench.studies.fixed_load run x",
             "commit": "abc1234", "date": "2026-12-06", "knee": 2.0, "knee_source": "a test",
             "preset": "a100-80g", "model": "llama-3.1-8b", "arrivals": "poisson",
             "memory_pressure": 1.0, "policies": ["defaults", "optimized"],
             "config": {"flat_growth": 0.1, "steady": {"warmup_seconds": 150.0,
                                                       "window_programs": 200,
                                                       "tail_seconds": 600.0}},
             "runs": [r.to_dict() for r in runs.runs]}
    path = tmp_path / "unit.runs.json"
    path.write_text(json.dumps(saved))
    monkeypatch.setattr(study, "REPO", tmp_path)
    study.main(["report", "--runs", str(path)])
    md = (tmp_path / "unit.md").read_text()
    assert "Knee 2 programs/s (a test)" in md and "Commit abc1234" in md
    (found,) = load_studies(tmp_path / "bench/results/report")
    assert found.name == "fixed_load_unit" and found.commit == "abc1234"
    rows = {row.key: row for row in found.rows}
    assert rows["0.7.defaults-vs-optimized.mean"].value == pytest.approx(0.9)
    assert rows["0.7.defaults-vs-optimized.mean"].note == "wins, 2 seeds"
    assert rows["0.95.optimized.mean"].note == "2 seeds"
    assert rows["0.95.optimized.flat_runs"].value == 2
    assert rows["0.95.optimized.flat_runs"].note == \
        "backlog growth per seed: s0: +0.010, s1: +0.010, s2: +0.300 (backlog grows)"
    assert len(found.rows) == 2 * 2 * 4 + 2 * 3  # flat runs and figures, then comparisons


@pytest.mark.parametrize("argv, message", [
    (["run", "--workload", "mixed", "--knee", "2", "--name", "x", "--policies", "nope"],
     "policies"),
    (["run", "--workload", "mixed", "--knee", "2", "--name", "x", "--fractions", "a"],
     "numbers"),
    (["knee", "--workload", "mixed", "--arrivals", "gamma:-1"], "arrivals|CV|cv"),
    (["knee", "--workload", "mixed", "--memory-pressure", "2"], "pressure|fraction|1"),
    (["knee", "--workload", "mixed", "--preset", "tpu"], "preset"),
    (["run", "--workload", "mixed", "--knee", "2", "--name", "Bad-Name"], "name")])
def test_cli_rejects_bad_arguments_by_name(argv, message, capsys):
    with pytest.raises(SystemExit):
        study.main(argv)
    assert any(word in capsys.readouterr().err for word in message.split("|"))


def test_cli_rejects_a_bad_knee_with_its_name(tmp_path):
    with pytest.raises(SystemExit, match="knee"):
        study.main(["run", "--workload", "sharegpt", "--knee", "0", "--name", "x",
                    "--out", str(tmp_path)])


def test_runs_done_before_are_taken_not_simulated(monkeypatch):
    simulated = []

    def fake_run(workload, base, seed, policy, rate, steady, preset, model, engine_overrides):
        simulated.append((seed, policy))
        return _fake_steady(2, policy)

    monkeypatch.setattr(fl, "steady_run", fake_run)
    config = FixedLoadConfig(0.1, fractions=(0.5,), seeds=(0,), steady=TINY)
    old = run(0, 0.5, "optimized", 0.25)
    runs = run_fixed_load("sharegpt", ["optimized", "gittins"], config,
                          done_before={(0, 0.5, "optimized"): old})
    assert simulated == [(0, "gittins")]
    assert runs[0] is old and runs[1].policy == "gittins"


def test_reuse_needs_the_same_settings(tmp_path):
    saved = {"name": "u", "workload": "mixed", "knee": 2.0, "preset": "a100-80g",
             "model": "llama-3.1-8b", "arrivals": "poisson", "memory_pressure": 1.0,
             "config": {"steady": {"window_programs": 200}, "flat_growth": 0.1},
             "runs": [run(1, 0.7, "optimized", 0.5).to_dict()]}
    path = tmp_path / "u.runs.json"
    path.write_text(json.dumps(saved))
    assert list(study.reusable_runs(path, saved)) == [(1, 0.7, "optimized")]
    with pytest.raises(ValueError, match="knee is 2.0 there, 2.5 here"):
        study.reusable_runs(path, {**saved, "knee": 2.5})
    with pytest.raises(ValueError, match="config.steady"):
        study.reusable_runs(path, {**saved, "config": {"steady": {}, "flat_growth": 0.1}})


# ----- runs at once ---------------------------------------------------------------------------
def test_runs_in_worker_processes_are_the_runs_made_one_at_a_time():
    config = FixedLoadConfig(0.1, fractions=(0.5,), seeds=(0,), steady=TINY, flat_growth=0.5)
    alone = run_fixed_load("sharegpt", ["optimized", "defaults"], config)
    seen = []
    together = run_fixed_load("sharegpt", ["optimized", "defaults"], config,
                              on_run=seen.append, jobs=2)

    def figures_of(run):  # all but the wall clock, which depends on the machine
        return {**run.to_dict(), "sim_wall_seconds": None}

    assert [figures_of(r) for r in together] == [figures_of(r) for r in alone]
    assert [r.policy for r in together] == ["optimized", "defaults"]
    assert sorted(r.policy for r in seen) == ["defaults", "optimized"]


def test_runs_done_before_are_taken_with_workers_too():
    config = FixedLoadConfig(0.1, fractions=(0.5,), seeds=(0, 1), steady=TINY)
    old = {(seed, 0.5, "optimized"): run(seed, 0.5, "optimized", 0.25 * (seed + 1))
           for seed in (0, 1)}
    seen = []
    runs = run_fixed_load("sharegpt", ["optimized"], config, on_run=seen.append,
                          done_before=old, jobs=2)
    assert runs == [old[(0, 0.5, "optimized")], old[(1, 0.5, "optimized")]]
    assert sorted(seen, key=lambda r: r.seed) == runs


@pytest.mark.parametrize("jobs", [0, 65])
def test_jobs_out_of_bounds_are_refused_by_name(jobs, tmp_path, capsys):
    config = FixedLoadConfig(0.1, fractions=(0.5,), seeds=(0,), steady=TINY)
    with pytest.raises(ValueError, match=r"jobs: must be in \[1, 64\]"):
        run_fixed_load("sharegpt", ["optimized"], config, jobs=jobs)
    with pytest.raises(SystemExit):
        study.main(["run", "--workload", "sharegpt", "--knee", "1", "--name", "x",
                    "--out", str(tmp_path), "--jobs", str(jobs)])
    assert f"jobs: must be in [1, 64], got {jobs}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_run_failing_in_a_worker_raises_its_error():
    config = FixedLoadConfig(0.1, fractions=(0.5,), seeds=(0,), steady=TINY)
    seen = []
    with pytest.raises(ValueError, match="policy must be one of"):
        run_fixed_load("sharegpt", ["nope", "optimized"], config, on_run=seen.append, jobs=2)
    assert all(r.policy == "optimized" for r in seen)
