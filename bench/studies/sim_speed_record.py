"""The REPORT record of a `bench.studies.sim_speed --record NAME` run (issue 39, item 5):
the base/head ratios' medians (process and `simulate()` alone), every round's, the ratio of
each tree's fastest run, and how many of the compared figures are identical."""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence

from bench.report.records import ReportRow, ReportStudy

NOTES = "bench/notes/2026-12-02-simulator-speed.md"
TARGET = 4.0  # the speed-up of simulate() over the base commit

# (row key prefix, what the ratio times)
TIMED = (("process", "process wall seconds"), ("simulate", "simulate() wall seconds"))


def record_rows(base: str, workload: str, policy: str, ratios: Sequence[float],
                sim_ratios: Sequence[float], fastest: Mapping[str, float],
                compared: Sequence[str], differing: Sequence[str]) -> tuple[ReportRow, ...]:
    """Rows of one run: `ratios` and `sim_ratios` (base / head, per round, process and
    `simulate()` alone), `fastest` ("process", "simulate": base's fastest run / head's),
    the figures `compared` and those `differing` in any round."""
    rows = []
    for (key, timed), values in zip(TIMED, (ratios, sim_ratios)):
        figure = f"{base}'s / HEAD's {timed} (x)"
        median = statistics.median(values)
        note = f"min {min(values):.2f}x / max {max(values):.2f}x"
        if key == "simulate":
            note += f"; the issue's {TARGET:g}x is {'met' if median >= TARGET else 'missed'}"
        rows.append(ReportRow(f"{key}.median", workload, policy,
                              f"{figure}, median of {len(values)} alternating rounds",
                              round(median, 2), note=note))
        rows.append(ReportRow(f"{key}.fastest", workload, policy,
                              f"{figure}, fastest run of each", round(fastest[key], 2)))
        rows += [ReportRow(f"{key}.round{i + 1}", workload, policy, f"{figure}, round {i + 1}",
                           round(value, 2)) for i, value in enumerate(values)]
    same = len(compared) - len(differing)
    rows.append(ReportRow("identical_figures", workload, policy,
                          f"figures identical to {base}'s (of {len(compared)})", same,
                          note=f"differ: {', '.join(differing)}" if differing else ""))
    return tuple(rows)


def sim_speed_study(name: str, base: str, command: str, commit: str, date: str, machine: str,
                    rows: tuple[ReportRow, ...]) -> ReportStudy:
    return ReportStudy(name=name, title=f"The simulator against {base} (issue 39)",
                       command=command, commit=commit, date=date, machine=machine,
                       notes=NOTES, rows=rows)
