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
