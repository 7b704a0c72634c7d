"""bench/REPORT.md is exactly what `python -m bench.report` makes from bench/results/report/
(a stale or hand-edited report fails here), the records round-trip, and every bad field is
refused with an error naming it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.report.__main__ import main
from bench.report.records import (ReportRow, ReportStudy, current_commit, load_studies,
                                  study_to_json, write_study)
from bench.report.render import render_report, significant

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "bench" / "results" / "report"


def make_row(**changes) -> ReportRow:
    fields = dict(key="ratio.median", workload="sharegpt-64", policy="-",
                  figure="Agentix / vLLM tokens/s (x)", value=0.79, low=0.71, high=0.83,
                  note="median of 3")
    return ReportRow(**{**fields, **changes})


def make_study(**changes) -> ReportStudy:
    fields = dict(name="vs_test", title="A test study", command="python -m bench.report",
                  commit="abc1234+dirty", date="2026-12-04", machine="2-core CPU",
                  notes="bench/notes/2026-12-04-test.md",
                  rows=(make_row(), make_row(key="tokens", low=None, high=None, value=241.4)))
    return ReportStudy(**{**fields, **changes})


def test_the_report_is_what_the_records_give():
    assert (ROOT / "bench" / "REPORT.md").read_text() == render_report(load_studies(RECORDS))


def test_check_passes_on_the_committed_report():
    assert main(["--check"]) == 0


def test_every_study_names_a_note_that_exists():
    for study in load_studies(RECORDS):
        assert (ROOT / study.notes).is_file(), f"{study.name}: no {study.notes}"


def test_row_ids_are_unique_and_anchored():
    studies = load_studies(RECORDS)
    ids = [study.row_id(row) for study in studies for row in study.rows]
    assert len(ids) == len(set(ids))
    report = render_report(studies)
    for row_id in ids:
        assert report.count(f'<a id="{row_id}"></a>') == 1


def test_render_refuses_a_duplicate_id():
    with pytest.raises(ValueError, match=r"vs_test\.tokens"):
        render_report([make_study(), make_study()])


def test_a_row_shows_its_interval_commit_and_study():
    line = next(line for line in render_report([make_study()]).splitlines()
                if "vs_test.ratio.median" in line)
    assert "| 0.79 [0.71, 0.83] | abc1234+dirty | [vs_test](#vs_test) |" in line


def test_round_trip(tmp_path):
    study = make_study()
    path = write_study(study, tmp_path)
    assert path == tmp_path / "vs_test.json"
    assert load_studies(tmp_path) == [study]
    text = path.read_text()
    assert text.endswith("}\n") and text.startswith('{\n "name": "vs_test"')
    write_study(study, tmp_path)
    assert path.read_text() == text


def test_load_sorts_by_name(tmp_path):
    for name in ("b_study", "a_study"):
        write_study(make_study(name=name), tmp_path)
    assert [study.name for study in load_studies(tmp_path)] == ["a_study", "b_study"]


@pytest.mark.parametrize("changes, field", [
    (dict(key="Bad Key"), "key"),
    (dict(key=""), "key"),
    (dict(workload=""), "workload"),
    (dict(policy=" "), "policy"),
    (dict(figure="two\nlines"), "figure"),
    (dict(value=float("nan")), "value"),
    (dict(value="0.79"), "value"),
    (dict(value=True), "value"),
    (dict(low=None), "low/high"),
    (dict(high=None), "low/high"),
    (dict(low=0.8), "low/high"),
    (dict(high=0.7), "low/high"),
    (dict(note=None), "note"),
])
def test_a_bad_row_field_is_named(changes, field):
    with pytest.raises(ValueError, match=rf"\.{field}:"):
        make_row(**changes)


@pytest.mark.parametrize("changes, field", [
    (dict(name="Bad-Name"), "name"),
    (dict(title=""), "title"),
    (dict(command=""), "command"),
    (dict(commit=""), "commit"),
    (dict(date="2026-13-01"), "date"),
    (dict(date="4 Dec 2026"), "date"),
    (dict(machine=""), "machine"),
    (dict(notes="bench/RESULTS.md"), "notes"),
    (dict(rows=()), "rows"),
    (dict(rows=[make_row()]), "rows"),
    (dict(rows=(make_row(), make_row())), "rows"),
])
def test_a_bad_study_field_is_named(changes, field):
    with pytest.raises(ValueError, match=rf"\.{field}:"):
        make_study(**changes)


def _write_json(folder: Path, data: object, name: str = "vs_test") -> None:
    (folder / f"{name}.json").write_text(json.dumps(data))


@pytest.mark.parametrize("edit, message", [
    (lambda data: data.pop("commit"), r"missing fields \['commit'\]"),
    (lambda data: data.update(extra=1), r"unknown fields \['extra'\]"),
    (lambda data: data["rows"][0].pop("value"), r"rows\[0\]: missing fields \['value'\]"),
    (lambda data: data["rows"][1].update(key="ratio.median"), r"rows: duplicate keys"),
    (lambda data: data["rows"][0].update(high=None), r"low/high"),
    (lambda data: data.update(rows={}), r"study\.rows"),
    (lambda data: data.update(name="other"), r"study\.name 'other' is not the file's stem"),
])
def test_a_bad_file_is_named_with_its_field(tmp_path, edit, message):
    data = study_to_json(make_study())
    edit(data)
    _write_json(tmp_path, data)
    with pytest.raises(ValueError, match=message) as error:
        load_studies(tmp_path)
    assert "vs_test.json" in str(error.value)


def test_a_file_that_is_not_json_is_named(tmp_path):
    (tmp_path / "vs_test.json").write_text("{")
    with pytest.raises(ValueError, match="vs_test.json"):
        load_studies(tmp_path)


def test_optional_row_fields_may_be_left_out(tmp_path):
    data = study_to_json(make_study())
    for field in ("low", "high", "note"):
        data["rows"][1].pop(field)
    _write_json(tmp_path, data)
    assert load_studies(tmp_path)[0].rows[1] == dataclasses.replace(make_study().rows[1], note="")


@pytest.mark.parametrize("value, text", [
    (0.79, "0.79"), (4.4, "4.4"), (1183, "1183"), (13646, "13650"), (0.003541, "0.003541"),
    (6.7349, "6.735"), (0, "0"), (-2.5, "-2.5"), (1e-5, "0.00001"),
])
def test_four_significant_digits(value, text):
    assert significant(value) == text


def test_current_commit(tmp_path):
    assert current_commit(tmp_path) == "unknown"  # not a repository
    commit = current_commit(ROOT)
    assert commit == "unknown" or commit.removesuffix("+dirty").isalnum()
