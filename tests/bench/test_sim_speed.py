"""The simulator-speed study compares the simulated figures both runs share, never the
wall clock, and names those that differ."""

import argparse

from bench.studies.sim_speed import comparable, compare, differences, sim_command


def test_wall_clock_keys_are_left_out():
    assert comparable({"sim_wall_seconds": 3.2, "num_steps": 7, "stats": {"a": 1}}) == \
        {"num_steps": 7, "stats.a": 1}


def test_compare_shares_keys_and_names_differences():
    base = {"num_steps": 7, "mean_norm_latency": 0.5, "sim_wall_seconds": 40.0,
            "by_workload": {"lats": {"p99": 1.0}}}
    head = {"num_steps": 7, "mean_norm_latency": 0.5, "sim_wall_seconds": 10.0,
            "by_workload": {"lats": {"p99": 1.5}}, "itl_p50_s": 0.02}
    compared, differing = compare(base, head)
    assert compared == ["by_workload.lats.p99", "mean_norm_latency", "num_steps"]
    assert differing == ["by_workload.lats.p99"]


def test_the_command_pins_policy_and_asks_for_json():
    args = argparse.Namespace(workload="mixed", policy="atlas", programs=400, rate=8.0, seed=0)
    command = sim_command(args)
    assert command[3:6] == ["bench", "sim", "--workload"] and "server.cli" in command[2]
    assert "--json" in command and command[command.index("--policy") + 1] == "atlas"


def test_differences_name_both_values():
    assert differences({"s": {"a": 1}}, {"s": {"a": 2}}, ["s.a"]) == "  s.a: 1 -> 2"


def test_record_rows_give_medians_rounds_and_identical_count():
    from bench.studies.sim_speed_record import record_rows, sim_speed_study

    rows = record_rows("1534e7e", "mixed 400@8", "atlas", [1.2, 1.5, 1.3], [1.4, 2.0, 1.6],
                       {"process": 1.45, "simulate": 1.9}, ["a", "b", "c"], ["b"])
    by_key = {row.key: row for row in rows}
    assert [row.key for row in rows] == [
        "process.median", "process.fastest", "process.round1", "process.round2",
        "process.round3", "simulate.median", "simulate.fastest", "simulate.round1",
        "simulate.round2", "simulate.round3", "identical_figures"]
    assert by_key["process.median"].value == 1.3
    assert by_key["simulate.median"].value == 1.6
    assert by_key["simulate.median"].note == "min 1.40x / max 2.00x; the issue's 4x is missed"
    assert by_key["simulate.round2"].value == 2.0
    assert by_key["process.fastest"].value == 1.45 and by_key["simulate.fastest"].value == 1.9
    assert by_key["identical_figures"].value == 2
    assert by_key["identical_figures"].note == "differ: b"
    assert "(of 3)" in by_key["identical_figures"].figure
    study = sim_speed_study("sim_speed", "1534e7e", "python -m bench.studies.sim_speed",
                            "abc1234", "2026-12-06", "2-core CPU", rows)
    assert study.notes == "bench/notes/2026-12-02-simulator-speed.md"


def test_a_median_at_the_target_is_met():
    from bench.studies.sim_speed_record import record_rows

    rows = record_rows("b", "w", "p", [4.0], [4.0], {"process": 4.0, "simulate": 4.0}, ["a"],
                       [])
    assert rows[3].key == "simulate.median" and rows[3].note.endswith("the issue's 4x is met")
    assert rows[-1].value == 1 and rows[-1].note == ""
