"""The latency-frontier study: the default against MLFQ, the plotted means, and one small run."""

import json

import pytest

from bench.studies import latency_frontier
from bench.studies.frontier_report import (FrontierRow, against_baseline, seed_means,
                                           steady_seeds)


def row(variant="gittins-ttft2048", seed=0, steady=True, mean=0.04, ttft=0.5, itl=0.03):
    return FrontierRow(variant, seed, 8.0, steady, "steady" if steady else "did not drain",
                       600, 600 if steady else 500, mean, 2 * mean, 3 * mean, ttft / 5, ttft,
                       itl)


def test_the_default_is_beyond_the_baseline_only_when_at_or_below_it_on_all_three():
    mlfq = row("mlfq", mean=0.05, ttft=0.5, itl=0.03)
    assert against_baseline(row(mean=0.05, ttft=0.5, itl=0.03), mlfq) == "yes"  # ties count
    assert against_baseline(row(mean=0.04, ttft=0.6, itl=0.03), mlfq) == \
        "no: worse on TTFT P99"
    assert against_baseline(row(mean=0.06, ttft=0.4, itl=0.05), mlfq) == \
        "no: worse on mean, ITL P99"
    overloaded_mlfq = row("mlfq", steady=False, mean=0.5, ttft=0.5, itl=0.03)
    assert against_baseline(row(mean=0.9, ttft=0.5, itl=0.03), overloaded_mlfq) == "yes"
    assert against_baseline(row(steady=False), mlfq) == "no: the default is overloaded"


def test_the_plot_shows_means_over_the_seeds_where_every_variant_is_steady():
    rows = [row("a", 0, mean=0.02, ttft=1.0, itl=0.01), row("b", 0, mean=0.05),
            row("a", 1, mean=0.04, ttft=3.0, itl=0.03), row("b", 1, steady=False),
            row("a", 2, mean=0.06, ttft=5.0, itl=0.05), row("b", 2, mean=0.07, ttft=1.0,
                                                            itl=0.02)]
    assert steady_seeds(rows) == [0, 2]
    assert seed_means(rows) == {"a": pytest.approx((0.04, 3.0, 0.03)),
                                "b": pytest.approx((0.06, 0.75, 0.025))}
    assert seed_means([row("b", 1, steady=False)]) == {}


def test_a_small_run_writes_its_rows_table_and_plot(tmp_path):
    latency_frontier.main(["--workload", "bfcl", "--rate", "0.3", "--seeds", "0",
                           "--variants", "mlfq,gittins-ttft2048", "--warmup-programs", "5",
                           "--window-programs", "10", "--tail-programs", "60",
                           "--out", str(tmp_path), "--no-progress"])
    rows = json.loads((tmp_path / "frontier_bfcl.json").read_text())
    assert [(r["variant"], r["seed"], r["steady"]) for r in rows] == [
        ("mlfq", 0, True), ("gittins-ttft2048", 0, True)]
    assert all(r["itl_p99"] > 0 and r["ttft_p99"] > 0 for r in rows)
    text = (tmp_path / "frontier_bfcl.md").read_text()
    assert "| 0 | gittins-ttft2048 |" in text and "in both planes: **" in text
    assert (tmp_path / "frontier_bfcl.png").stat().st_size > 0


def test_an_unknown_variant_or_workload_or_a_bad_window_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        latency_frontier.main(["--workload", "bfcl", "--rate", "1", "--variants", "fifo",
                               "--out", "/tmp/unused"])
    assert "variants must be a comma-separated list" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        latency_frontier.main(["--workload", "chess", "--rate", "1", "--out", "/tmp/unused"])
    assert "invalid choice: 'chess'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        latency_frontier.main(["--workload", "bfcl", "--rate", "1", "--warmup-programs", "-1",
                               "--out", "/tmp/unused"])
    assert "warmup_programs: must be >= 0" in capsys.readouterr().err
