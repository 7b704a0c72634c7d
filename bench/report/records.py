"""The records bench/REPORT.md is made from: one JSON file per study under
bench/results/report/, `<name>.json`, each a `ReportStudy` with its `ReportRow`s.

A study is one command that reproduces every one of its rows, the commit the figures were
measured at, and the bench/notes/ file that explains them. A row is one figure: a workload, a
policy ("-" where none applies), what is measured (unit included), the value, and optionally a
confidence interval (both ends or neither) and a short note. A row's id in the report is
`<study name>.<row key>`.

Every field is checked when a record is built: a bad one raises `ValueError` naming it (and,
from `load_studies`, the file).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import subprocess
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

DEFAULT_FOLDER = Path("bench/results/report")
KEY = re.compile(r"[a-z0-9_.@-]+")
NAME = re.compile(r"[a-z0-9_]+")
NOTES = re.compile(r"bench/notes/[^/\s]+\.md")


def record_name(text: str) -> str:
    """`text` if it can name a study ([a-z0-9_]+); the argparse type of the studies' name
    options (argparse.ArgumentTypeError otherwise)."""
    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected [a-z0-9_]+, got {text!r}")
    return text


def _text(owner: str, name: str, value: object, *, empty: bool = False) -> None:
    """A one-line string, non-empty unless `empty`."""
    if not isinstance(value, str):
        raise ValueError(f"{owner}.{name}: expected a string, got {value!r}")
    if "\n" in value or (not empty and not value.strip()):
        raise ValueError(f"{owner}.{name}: expected one non-empty line, got {value!r}")


def _number(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name}: expected a finite number, got {value!r}")


@dataclass(frozen=True)
class ReportRow:
    """One figure. `low` and `high` are a confidence interval: both or neither, and
    low <= value <= high."""

    key: str
    workload: str
    policy: str
    figure: str
    value: float
    low: float | None = None
    high: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        owner = f"row {self.key!r}"
        if not isinstance(self.key, str) or not KEY.fullmatch(self.key):
            raise ValueError(f"{owner}.key: expected [a-z0-9_.@-]+")
        for name in ("workload", "policy", "figure"):
            _text(owner, name, getattr(self, name))
        _text(owner, "note", self.note, empty=True)
        _number(owner, "value", self.value)
        if (self.low is None) != (self.high is None):
            raise ValueError(f"{owner}.low/high: give both ends of the interval or neither")
        if self.low is not None:
            _number(owner, "low", self.low)
            _number(owner, "high", self.high)
            if not self.low <= self.value <= self.high:
                raise ValueError(f"{owner}.low/high: expected low <= value <= high, got "
                                 f"{self.low} <= {self.value} <= {self.high}")


@dataclass(frozen=True)
class ReportStudy:
    """One study: the command reproducing every row, where and when it was measured, and the
    bench/notes/ file (a path from the repository root) explaining the figures."""

    name: str
    title: str
    command: str
    commit: str
    date: str
    machine: str
    notes: str
    rows: tuple[ReportRow, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ValueError(f"study.name: expected [a-z0-9_]+, got {self.name!r}")
        owner = f"study {self.name!r}"
        for name in ("title", "command", "commit", "machine"):
            _text(owner, name, getattr(self, name))
        _text(owner, "date", self.date)
        try:
            datetime.date.fromisoformat(self.date)
        except ValueError:
            raise ValueError(f"{owner}.date: expected YYYY-MM-DD, got {self.date!r}") from None
        _text(owner, "notes", self.notes)
        if not NOTES.fullmatch(self.notes):
            raise ValueError(f"{owner}.notes: expected bench/notes/<file>.md, got {self.notes!r}")
        if (not isinstance(self.rows, tuple) or not self.rows
                or not all(isinstance(row, ReportRow) for row in self.rows)):
            raise ValueError(f"{owner}.rows: expected a non-empty tuple of ReportRow")
        keys = [row.key for row in self.rows]
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        if duplicated:
            raise ValueError(f"{owner}.rows: duplicate keys {duplicated}")

    def row_id(self, row: ReportRow) -> str:
        return f"{self.name}.{row.key}"


def _build(cls: type, data: object, owner: str):
    """`cls(**data)`, naming the missing or unknown field."""
    if not isinstance(data, dict):
        raise ValueError(f"{owner}: expected an object, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{owner}: unknown fields {unknown}")
    required = [f.name for f in fields(cls)
                if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"{owner}: missing fields {missing}")
    return cls(**data)


def study_from_json(data: object) -> ReportStudy:
    if not isinstance(data, dict):
        raise ValueError(f"study: expected an object, got {type(data).__name__}")
    rows = data.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"study.rows: expected a list, got {rows!r}")
    built = tuple(_build(ReportRow, row, f"rows[{index}]") for index, row in enumerate(rows))
    return _build(ReportStudy, {**data, "rows": built}, "study")


def study_to_json(study: ReportStudy) -> dict:
    """Fields in declaration order, every row field included."""
    data = {f.name: getattr(study, f.name) for f in fields(ReportStudy)}
    data["rows"] = [{f.name: getattr(row, f.name) for f in fields(ReportRow)}
                    for row in study.rows]
    return data


def write_study(study: ReportStudy, folder: Path = DEFAULT_FOLDER) -> Path:
    """Write `<folder>/<name>.json` (indent 1, trailing newline); returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{study.name}.json"
    path.write_text(json.dumps(study_to_json(study), indent=1, ensure_ascii=False) + "\n")
    return path


def load_studies(folder: Path = DEFAULT_FOLDER) -> list[ReportStudy]:
    """Every `*.json` in `folder`, sorted by name; `ValueError` naming the file and the field
    for a bad record, or a file whose stem is not its study's name."""
    studies = []
    for path in sorted(folder.glob("*.json")):
        try:
            study = study_from_json(json.loads(path.read_text()))
        except ValueError as exc:  # JSONDecodeError is one
            raise ValueError(f"{path}: {exc}") from None
        if study.name != path.stem:
            raise ValueError(f"{path}: study.name {study.name!r} is not the file's stem")
        studies.append(study)
    return studies


def current_commit(root: Path) -> str:
    """`git rev-parse --short HEAD` in `root`, with "+dirty" when a tracked file has changes;
    "unknown" when git fails."""
    try:
        head = _git(root, "rev-parse", "--short", "HEAD").strip()
        changes = _git(root, "status", "--porcelain", "--untracked-files=no").strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+dirty" if changes else head


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout
