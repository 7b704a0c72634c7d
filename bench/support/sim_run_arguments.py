"""The options of a study that instruments one simulated run: which trace and which baseline
(`add_sim_run_arguments`), and the trace they name (`sim_run_trace`)."""

from __future__ import annotations

import argparse
import importlib

from bench.sim.baselines import BASELINES
from bench.sim.trace import Trace
from bench.sim.workloads import WORKLOADS


def add_sim_run_arguments(parser: argparse.ArgumentParser, programs: int) -> None:
    """--workload (mixed), --programs (`programs`), --rate (0.5), --seed (0), --policy
    (atlas: a baseline's name)."""
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="mixed")
    parser.add_argument("--programs", type=int, default=programs)
    parser.add_argument("--rate", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", choices=sorted(BASELINES), default="atlas")


def sim_run_trace(args: argparse.Namespace) -> Trace:
    """The trace the options of `add_sim_run_arguments` name."""
    return importlib.import_module(f"bench.sim.workloads.{args.workload}").generate(
        args.programs, args.seed, args.rate)
