"""The inferred-programs study prints one row per workload: the four runs of one trace,
their ratios to explicit ids (1 for a trace where nothing waits), and the assignment."""

import re

from bench.sim.workloads import lats
from bench.studies import inferred_programs
from bench.studies.inferred_programs import compare, main


def test_a_row_holds_the_four_runs_their_ratios_and_the_assignment():
    cells = [c.strip() for c in compare("lats", 2, 0.01, 0, "gittins").strip("|").split("|")]
    calls = sum(len(p.calls) for p in lats.generate(2, 0, 0.01).programs)
    assert cells[:3] == ["lats", "2 @ 0.01/s", str(calls)]
    assert len(set(cells[3:7])) == 1  # two programs far apart: nothing waits, one schedule
    assert cells[7:10] == ["1.000 / 1.000"] * 3
    split, false, programs = map(int, re.fullmatch(
        r"\d+\.\d% \((\d+) split, (\d+) false; (\d+) programs\)", cells[10]).groups())
    assert false == 0 and programs > 2 and split >= programs - 2  # LATS's prompts split


def test_the_table_has_one_row_per_workload_asked_for(capsys, monkeypatch):
    monkeypatch.setitem(inferred_programs.LOADS["burst"], "lats", (2, 0.01))
    main(["--load", "burst", "--workloads", "lats", "--policy", "atlas"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("atlas, burst load, seed 0")
    assert lines[1].count("|") == lines[2].count("|") == lines[3].count("|") == 12
    assert lines[3].startswith("| lats | 2 @ 0.01/s |") and len(lines) == 4
