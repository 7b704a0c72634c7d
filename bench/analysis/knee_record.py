"""A knee search's REPORT row, merged into a record holding one row per policy (issue 39).

`python -m bench.studies.fixed_load knee ... --record NAME` writes its result here instead of
someone copying the printed search into a record by hand. One record collects the searches
that differ only in policy and start rate: its command shows those two as `P` and `R`, and
each row's note says its R, the bracket the search found and the commit it ran at.
"""

from __future__ import annotations

import math
import shlex
from typing import Sequence

from bench.analysis.sweep import SweepPoint
from bench.report.records import ReportRow, ReportStudy

PREFIX = "python -m bench.studies.fixed_load"
# The knee command's options that vary between the rows of one record, and their stand-ins.
PER_ROW = {"--policy": "P", "--start-rate": "R"}
COMMIT = "; commit "  # ends every row's note, before the commit the search ran at


def record_command(argv: Sequence[str]) -> str:
    """The knee command `argv` (after the module name) with the per-row options moved right
    after the subcommand, their values shown as stand-ins; the other words keep their order."""
    words: list[str] = []
    options = iter(argv[1:])
    for word in options:
        name, eq, _ = word.partition("=")
        if name in PER_ROW:
            if not eq:
                next(options, None)
        else:
            words.append(word)
    per_row = [w for name, stand_in in PER_ROW.items() for w in (name, stand_in)]
    return f"{PREFIX} {shlex.join([*argv[:1], *per_row, *words])}"


def knee_row(workload: str, policy: str, seed: int, start_rate: float, knee: float,
             points: Sequence[SweepPoint], commit: str) -> ReportRow:
    """The row of one search whose highest steady rate was `knee` (to 4 significant digits,
    as printed): its note gives the start rate, the lowest overloaded rate above the knee
    (the bracket), every rate tried and `commit`."""
    if not math.isfinite(knee) or knee <= 0:
        raise ValueError(f"knee: expected a positive rate, got {knee!r}")
    above = [p.rate for p in points if p.overloaded and p.rate > knee]
    bracket = (f"overloaded at {min(above):.4g}/s" if above
               else "no overloaded rate above it was tried")
    tried = ", ".join(f"{p.rate:.4g} {'overloaded' if p.overloaded else 'steady'}"
                      for p in points)
    return ReportRow(policy, workload, policy,
                     f"knee (programs/s): highest steady rate found, seed {seed}",
                     float(f"{knee:.4g}"),
                     note=f"R = {start_rate:g}; steady at {knee:.4g}/s, {bracket}; "
                          f"tried {tried}{COMMIT}{commit}")


def merged_record(existing: ReportStudy | None, row: ReportRow, *, name: str, title: str,
                  command: str, date: str, machine: str, notes: str) -> ReportStudy:
    """`existing` with `row` added (replacing the row of the same key), or a new record of
    that one row. ValueError when `existing` was made by another command (other settings
    than the policy and the start rate). The record's commit lists its rows' commits."""
    rows: tuple[ReportRow, ...] = (row,)
    if existing is not None:
        if existing.command != command:
            raise ValueError(f"record {name}: its command is {existing.command!r}, this "
                             f"search's is {command!r}; use another --record name")
        rows = tuple(r for r in existing.rows if r.key != row.key) + rows
    commits = dict.fromkeys(r.note.rpartition(COMMIT)[2] for r in rows)
    return ReportStudy(name=name, title=title, command=command, commit=", ".join(commits),
                       date=date, machine=machine, notes=notes, rows=rows)
