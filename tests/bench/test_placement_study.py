"""The load-balancer study's pieces: one run's figures, the capacity summary of a search, the
table."""

from __future__ import annotations

import json
import math

from bench.studies.placement_study import Run, capacity_table, main, run_one, summarize


def run(variant: str, rate: float, latency: float, hit: float) -> Run:
    return Run("mixed", variant, 4, rate, 10, 10, latency, hit, None)


def test_one_run_reports_the_cache_hit_rate_and_the_adaptive_cutoff():
    fixed = run_one("mixed", 8, "cutoff", 2, rate=4.0)
    auto = run_one("mixed", 8, "cutoff-auto", 2, rate=4.0)
    assert fixed.programs_completed == auto.programs_completed == 8
    assert 0.0 < fixed.cache_hit_rate < 1.0 and fixed.final_cutoff == 2048
    assert 256 <= auto.final_cutoff <= 16384


def test_summary_interpolates_the_capacity_and_takes_the_fastest_meeting_run():
    runs = [run("cutoff", 4.0, 0.05, 0.9), run("cutoff", 8.0, 0.08, 0.85),
            run("cutoff", 16.0, 0.2, 0.7)]
    summary = summarize(runs, target=0.1)
    assert summary["cache_hit_rate"] == 0.85
    # log-log interpolation between (8, 0.08) and (16, 0.2) at 0.1
    expected = math.exp(math.log(8) + (math.log(0.1) - math.log(0.08))
                        / (math.log(0.2) - math.log(0.08)) * math.log(2))
    assert math.isclose(summary["capacity"], expected, rel_tol=1e-9)


def test_table_gives_ratios_against_the_baselines():
    def entry(c: float) -> dict:
        return {"capacity": c, "cache_hit_rate": 0.5, "final_cutoff": None}

    out = {"mixed": {"target": 0.1, "variants": {
        "cutoff": entry(14.0), "round_robin": entry(10.0), "least_loaded": entry(7.0),
        "prefix_aware": entry(14.0), "cutoff-auto": entry(15.4)}}}
    row = capacity_table(out).splitlines()[-1]
    assert "1.40x / 2.00x / 1.00x" in row and row.endswith("| 1.10x |")


def test_scaling_at_a_per_replica_rate_runs_each_replica_count(tmp_path):
    main(["scaling", "--variants", "pinned", "--programs", "2", "--per-replica-rate", "2",
          "--jobs", "1", "--out", str(tmp_path)])
    out = json.loads((tmp_path / "scaling.json").read_text())
    runs = out["variants"]["pinned"]
    assert sorted(runs, key=int) == ["1", "2", "4", "8"]
    assert [(runs[n]["replicas"], runs[n]["num_programs"], runs[n]["rate"])
            for n in ("1", "2", "4", "8")] == [(1, 2, 2.0), (2, 4, 4.0), (4, 8, 8.0),
                                                (8, 16, 16.0)]
    assert all(runs[n]["programs_completed"] == runs[n]["num_programs"] for n in runs)
