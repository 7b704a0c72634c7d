"""Reports of a fixed-load comparison (`bench.analysis.fixed_load`): the backlog check of
every run, each policy's figures per class with their 95% intervals over seeds, and each
compared policy (`markdown`'s `ours`) against every other, paired by seed
(`bench.analysis.seed_stats`).

A figure is given over the seeds whose run was flat (`FixedRun.flat`: steady, the backlog
flat, the warm-up long enough); a cell names the seeds that were not and why ("seed 2: not
flat", "seed 2: backlog grows"). A comparison uses the seeds where both runs were flat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bench.analysis.fixed_load import ALL, FixedRun
from bench.analysis.seed_stats import Interval, interval, paired_ratio, verdict

FIGURES = (("mean", "mean normalized latency (s/token)"),
           ("p99", "P99 normalized latency (s/token)"),
           ("ttft_p99", "TTFT P99 (s)"))


def _ordered(values: Sequence) -> list:
    return list(dict.fromkeys(values))


@dataclass(frozen=True)
class Comparison:
    """`ours` / `theirs` on one figure of one class at one load, over `seeds` (both flat):
    the paired ratio's interval and its verdict ("loses", "wins", "tie", "n/a")."""

    klass: str
    fraction: float
    ours: str
    theirs: str
    figure: str
    ratio: Interval | None
    verdict: str
    seeds: tuple[int, ...]


class FixedLoadRuns:
    """The runs of one study, looked up by (fraction, policy, seed)."""

    def __init__(self, runs: Sequence[FixedRun]) -> None:
        if not runs:
            raise ValueError("runs: must not be empty")
        self.runs = list(runs)
        self.fractions = _ordered(r.fraction for r in runs)
        self.policies = _ordered(r.policy for r in runs)
        self.seeds = _ordered(r.seed for r in runs)
        self.classes = _ordered(c for r in runs for c in r.classes)
        self._by = {(r.fraction, r.policy, r.seed): r for r in runs}

    def run(self, fraction: float, policy: str, seed: int) -> FixedRun | None:
        return self._by.get((fraction, policy, seed))

    def counted_seeds(self, fraction: float, policy: str) -> list[int]:
        """The seeds whose run at (`fraction`, `policy`) was flat."""
        return [s for s in self.seeds
                if (r := self.run(fraction, policy, s)) is not None and r.flat and r.classes]

    def values(self, fraction: float, policy: str, klass: str, figure: str,
               seeds: Sequence[int]) -> list[float]:
        return [getattr(self.run(fraction, policy, s).classes[klass], figure) for s in seeds]

    def figure(self, fraction: float, policy: str, klass: str, figure: str) -> Interval | None:
        """The interval over the flat seeds (None when none was, or the class is absent)."""
        seeds = [s for s in self.counted_seeds(fraction, policy)
                 if klass in self.run(fraction, policy, s).classes]
        return interval(self.values(fraction, policy, klass, figure, seeds)) if seeds else None

    def compare(self, fraction: float, ours: str, theirs: str, klass: str,
                figure: str) -> Comparison:
        seeds = tuple(s for s in self.counted_seeds(fraction, ours)
                      if s in self.counted_seeds(fraction, theirs)
                      and klass in self.run(fraction, ours, s).classes)
        if not seeds:
            return Comparison(klass, fraction, ours, theirs, figure, None, "n/a", seeds)
        ratio = paired_ratio(self.values(fraction, ours, klass, figure, seeds),
                             self.values(fraction, theirs, klass, figure, seeds))
        return Comparison(klass, fraction, ours, theirs, figure, ratio, verdict(ratio), seeds)

    def comparisons(self, ours: str) -> list[Comparison]:
        """`ours` against every other policy, on every class, load and figure."""
        return [self.compare(f, ours, theirs, klass, figure)
                for klass in self.classes for f in self.fractions
                for theirs in self.policies if theirs != ours for figure, _ in FIGURES]


def _uncounted_note(runs: FixedLoadRuns, fraction: float, policy: str) -> str:
    """"; seed 2: not flat" for each seed a figure leaves out, with why."""
    notes = []
    for seed in runs.seeds:
        run = runs.run(fraction, policy, seed)
        if run is None:
            notes.append(f"seed {seed}: not run")
        elif run.verdict != "steady":
            notes.append(f"seed {seed}: {run.verdict}")
        elif not run.flat:
            notes.append(f"seed {seed}: not flat")
    return "".join(f"; {n}" for n in notes)


def backlog_cells(runs: FixedLoadRuns, fraction: float, policy: str) -> tuple[list[str], int]:
    """Each seed's backlog growth at (`fraction`, `policy`) as `s0: +0.024`, with "!" after a
    run whose warm-up was shorter than twice its time in system and its verdict when not
    steady; and how many of the runs were flat."""
    cells, flat = [], 0
    for seed in runs.seeds:
        run = runs.run(fraction, policy, seed)
        if run is None:
            cells.append(f"s{seed}: not run")
            continue
        flat += run.flat
        mark = "" if run.warm_enough else "!"
        state = "" if run.verdict == "steady" else f" ({run.verdict})"
        cells.append(f"s{seed}: {run.backlog_growth:+.3f}{mark}{state}")
    return cells, flat


def backlog_table(runs: FixedLoadRuns) -> str:
    """One row per (load, policy): `backlog_cells` (growth as a fraction of the window's
    programs) and the count of flat runs."""
    lines = ["| load | policy | backlog growth per seed | flat runs |", "| --- | --- | --- | --- |"]
    for fraction in runs.fractions:
        for policy in runs.policies:
            cells, flat = backlog_cells(runs, fraction, policy)
            lines.append(f"| {fraction:g} | {policy} | {', '.join(cells)} | "
                         f"{flat}/{len(runs.seeds)} |")
    return "\n".join(lines)


def figures_table(runs: FixedLoadRuns, klass: str) -> str:
    """Each (load, policy)'s mean, P99 and TTFT P99 for `klass`, with intervals."""
    lines = [f"| load | policy | {' | '.join(label for _, label in FIGURES)} |",
             "| --- | --- | --- | --- | --- |"]
    for fraction in runs.fractions:
        for policy in runs.policies:
            cells = []
            for name, _ in FIGURES:
                value = runs.figure(fraction, policy, klass, name)
                cells.append("no flat run" if value is None else value.text())
            note = _uncounted_note(runs, fraction, policy)
            lines.append(f"| {fraction:g} | {policy}{note} | {' | '.join(cells)} |")
    return "\n".join(lines)


def comparison_text(c: Comparison) -> str:
    if c.ratio is None:
        return "n/a"
    bold = "**" if c.verdict == "loses" else ""
    return f"{bold}{c.ratio.text(3)} {c.verdict}{bold}"


def comparison_table(runs: FixedLoadRuns, ours: str, klass: str) -> str:
    """`ours` / each other policy on `klass`: the paired ratio per figure and load."""
    lines = [f"| load | {ours} / | {' | '.join(label for _, label in FIGURES)} |",
             "| --- | --- | --- | --- | --- |"]
    for fraction in runs.fractions:
        for theirs in runs.policies:
            if theirs == ours:
                continue
            cells = [comparison_text(runs.compare(fraction, ours, theirs, klass, name))
                     for name, _ in FIGURES]
            lines.append(f"| {fraction:g} | {theirs} | {' | '.join(cells)} |")
    return "\n".join(lines)


def verdict_summary(runs: FixedLoadRuns, ours: str) -> str:
    """Counts of wins, ties and losses of `ours` against each policy, and every loss."""
    comparisons = runs.comparisons(ours)
    lines = [f"| {ours} against | wins | ties | losses | no interval |",
             "| --- | --- | --- | --- | --- |"]
    for theirs in runs.policies:
        if theirs == ours:
            continue
        mine = [c for c in comparisons if c.theirs == theirs]
        count = {v: sum(c.verdict == v for c in mine) for v in ("wins", "tie", "loses", "n/a")}
        lines.append(f"| {theirs} | {count['wins']} | {count['tie']} | {count['loses']} | "
                     f"{count['n/a']} |")
    losses = [c for c in comparisons if c.verdict == "loses"]
    lines.append("")
    if losses:
        lines.append(f"Losses of {ours} (ratio {ours} / other, 95% interval over seeds "
                     f"{', '.join(map(str, runs.seeds))}):")
        lines += [f"- {c.klass}, {c.fraction:g} x knee, {dict(FIGURES)[c.figure]}: "
                  f"{c.ratio.text(3)} against {c.theirs}" for c in losses]
    else:
        lines.append(f"{ours} loses nowhere outside the interval.")
    return "\n".join(lines)


def markdown(runs: FixedLoadRuns, ours: Sequence[str], header: str) -> str:
    """The whole report: `header`, the backlog check, each of `ours` against every other
    policy, then per class the figures and each of `ours` / the others."""
    parts = [header, "", "## Backlog check", "",
             "Growth of the backlog over the window as a fraction of the window's programs "
             "(flat: within the study's bound, steady, warm-up at least twice the time in "
             "system; `!`: warm-up shorter than that).", "", backlog_table(runs)]
    for mine in ours:
        parts += ["", f"## {mine} against every policy", "", verdict_summary(runs, mine)]
    for klass in runs.classes:
        title = "all measured programs" if klass == ALL else f"class {klass}"
        parts += ["", f"## Figures, {title}", "", figures_table(runs, klass)]
        for mine in ours:
            parts += ["", f"### {mine} / other, {title} (paired by seed)", "",
                      comparison_table(runs, mine, klass)]
    return "\n".join(parts) + "\n"
