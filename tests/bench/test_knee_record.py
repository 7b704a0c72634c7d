"""The knee search's REPORT record (bench/analysis/knee_record.py, `fixed_load knee --record`)."""

import json

import pytest

import bench.studies.fixed_load as study
from bench.analysis.knee_record import knee_row, merged_record, record_command
from bench.analysis.sweep import SweepPoint
from bench.report.records import study_from_json


def _point(rate, overloaded):
    return SweepPoint("mixed", "optimized", rate, 10, 10, 0.01, 0.02, 0.03, 1.0, 1.0, 0.1,
                      0.2, 0, 0, 1.0, overloaded)


POINTS = [_point(1.0, False), _point(2.0, True), _point(1.414, True), _point(1.189, False)]
SETTINGS = dict(name="fixed_load_knees_x", title="Knees: x", date="2026-12-06",
                machine="simulated", notes="bench/notes/2026-12-06-fixed-load.md")


@pytest.mark.parametrize("argv, expected", [
    (["knee", "--workload", "mixed", "--policy", "gittins", "--start-rate", "0.5", "--seed", "1"],
     "knee --policy P --start-rate R --workload mixed --seed 1"),
    (["knee", "--start-rate=2", "--workload", "mixed", "--policy=gittins"],
     "knee --policy P --start-rate R --workload mixed"),
    (["knee", "--workload", "mixed", "--record", "x"],
     "knee --policy P --start-rate R --workload mixed --record x"),
    (["knee", "--arrivals", "onoff:a b"], "knee --policy P --start-rate R --arrivals 'onoff:a b'"),
])
def test_record_command_puts_policy_and_start_rate_first_as_stand_ins(argv, expected):
    assert record_command(argv) == f"python -m bench.studies.fixed_load {expected}"


def test_knee_row_gives_the_knee_its_bracket_every_rate_tried_and_the_commit():
    row = knee_row("mixed", "optimized", 2, 1.0, 1.18920711500272, POINTS, "abc1234")
    assert (row.key, row.workload, row.policy, row.value) == ("optimized", "mixed", "optimized",
                                                              1.189)
    assert row.figure == "knee (programs/s): highest steady rate found, seed 2"
    assert row.note == ("R = 1; steady at 1.189/s, overloaded at 1.414/s; tried 1 steady, "
                        "2 overloaded, 1.414 overloaded, 1.189 steady; commit abc1234")
    assert (row.low, row.high) == (None, None)


def test_knee_row_says_when_no_overloaded_rate_was_tried_above_the_knee():
    row = knee_row("mixed", "optimized", 0, 1.0, 1.0, POINTS[:1], "c")
    assert "steady at 1/s, no overloaded rate above it was tried; tried 1 steady" in row.note
    with pytest.raises(ValueError, match="knee: expected a positive rate"):
        knee_row("mixed", "optimized", 0, 1.0, 0.0, POINTS, "c")


def test_merged_record_replaces_a_policys_row_and_lists_the_rows_commits():
    first = merged_record(None, knee_row("mixed", "optimized", 0, 1.0, 1.189, POINTS, "aaa"),
                          command="cmd", **SETTINGS)
    assert [r.key for r in first.rows] == ["optimized"] and first.commit == "aaa"
    second = merged_record(first, knee_row("mixed", "gittins", 0, 1.0, 1.414, POINTS, "bbb"),
                           command="cmd", **SETTINGS)
    assert [r.key for r in second.rows] == ["optimized", "gittins"]
    assert second.commit == "aaa, bbb"
    again = merged_record(second, knee_row("mixed", "optimized", 0, 1.0, 1.0, POINTS, "bbb"),
                          command="cmd", **SETTINGS)
    assert [(r.key, r.value) for r in again.rows] == [("gittins", 1.414), ("optimized", 1.0)]
    assert again.commit == "bbb"
    with pytest.raises(ValueError, match="record fixed_load_knees_x: its command is 'cmd'"):
        merged_record(again, again.rows[0], command="other", **SETTINGS)


def test_knee_command_writes_and_merges_its_record(tmp_path, monkeypatch, capsys):
    found = {"optimized": 1.189, "gittins": 1.414}
    monkeypatch.setattr(study, "REPO", tmp_path)
    monkeypatch.setattr(study, "current_commit", lambda root: "c0ffee0")
    monkeypatch.setattr(study, "find_knee",
                        lambda workload, steady, rate, iterations, seed, arrivals, preset, model,
                        overrides, policy: (found[policy], POINTS))
    base = ["knee", "--workload", "mixed", "--seed", "1", "--record", "mixed_seed1"]
    study.main([*base, "--policy", "optimized"])
    study.main([*base, "--policy", "gittins", "--start-rate", "1.2"])
    path = tmp_path / "bench/results/report/fixed_load_knees_mixed_seed1.json"
    record = study_from_json(json.loads(path.read_text()))
    assert [(r.key, r.value) for r in record.rows] == [("optimized", 1.189), ("gittins", 1.414)]
    assert record.command == ("python -m bench.studies.fixed_load knee --policy P --start-rate R "
                              "--workload mixed --seed 1 --record mixed_seed1")
    assert record.rows[1].note.startswith("R = 1.2; steady at 1.414/s, overloaded at 2/s")
    assert "knee: 1.414 programs/s" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="its command is"):
        study.main([*base[:-2], "--seed", "2", "--record", "mixed_seed1"])


def test_knee_command_records_nothing_without_a_steady_rate(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "REPO", tmp_path)
    monkeypatch.setattr(study, "find_knee", lambda *args: (None, POINTS[1:3]))
    with pytest.raises(SystemExit, match="no steady rate found, --record y unchanged"):
        study.main(["knee", "--workload", "mixed", "--record", "y"])
    assert not (tmp_path / "bench/results/report").exists()
