"""The simulator's speed against an older commit, side by side in one run, same results.

    python -m bench.studies.sim_speed [--base 1534e7e] [--repeats 3] [--programs 400]
        [--rate 8] [--workload mixed] [--policy atlas] [--seed 0] [--record NAME]

Extracts the base commit (`git archive BASE | tar -x`) into a temporary folder, then runs

    python -m server.cli bench sim --workload W --policy P --programs N --rate R --seed S --json

in that tree and in this one (subprocesses, cwd = each tree, this interpreter; `PRELUDE`
turns transformers' hub kernels off in both), alternating which goes first over `--repeats`
rounds. Prints each run's wall seconds (the whole process: imports and trace generation
included) and its `sim_wall_seconds` (`simulate()` alone), the ratios base/head per round
and their min/median/max, the ratio of each tree's fastest run (this machine's noise only
ever slows a run, so the fastest is the least disturbed), and checks the simulated figures
are identical: every key both JSON objects have (nested ones flattened: a newer tree's extra
keys are left out), except the wall-clock ones (`WALL_CLOCK_KEYS`), compared for equality to
the last digit. Exits 1
if any compared figure differs. `--record NAME` also writes the run's figures as the REPORT
record NAME (`bench.studies.sim_speed_record`), whether or not they all agree.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from bench.report.records import DEFAULT_FOLDER, current_commit, record_name, write_study
from bench.studies.sim_speed_record import record_rows, sim_speed_study
from bench.support.cpu_model import cpu_model

REPO = Path(__file__).resolve().parents[2]
WALL_CLOCK_KEYS = frozenset({"sim_wall_seconds"})
# Older trees have a top-level `kernels` package that shadows the pip `kernels` transformers
# imports when it is installed; both trees run with transformers' hub kernels off (the
# simulator never uses them), then `server.cli` as `-m` would.
PRELUDE = """
import runpy, sys
import transformers.utils as tu, transformers.utils.import_utils as iu
iu.is_kernels_available = tu.is_kernels_available = lambda *a, **k: False
sys.argv = ["server.cli", *sys.argv[1:]]
runpy.run_module("server.cli", run_name="__main__", alter_sys=True)
"""


def comparable(summary: dict, prefix: str = "") -> dict:
    """The summary's simulated figures, nested objects flattened to dotted keys
    (`scheduler_stats.num_admitted`): every key but the wall-clock ones."""
    flat = {}
    for key, value in summary.items():
        if key in WALL_CLOCK_KEYS:
            continue
        if isinstance(value, dict):
            flat.update(comparable(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differences(base: dict, head: dict, keys: list[str]) -> str:
    """`key base -> head` for each of `keys` (flattened), one per line."""
    base, head = comparable(base), comparable(head)
    return "\n".join(f"  {key}: {base[key]!r} -> {head[key]!r}" for key in keys)


def compare(base: dict, head: dict) -> tuple[list[str], list[str]]:
    """(keys compared, keys whose values differ) over the flattened keys both summaries
    share, wall-clock keys excluded; sorted."""
    base, head = comparable(base), comparable(head)
    shared = sorted(base.keys() & head.keys())
    return shared, [key for key in shared if base[key] != head[key]]


def sim_command(args: argparse.Namespace) -> list[str]:
    """The `bench sim` command line both trees run (`PRELUDE` standing for `-m server.cli`)."""
    return [sys.executable, "-c", PRELUDE, "bench", "sim", "--workload", args.workload,
            "--policy", args.policy, "--programs", str(args.programs), "--rate",
            str(args.rate), "--seed", str(args.seed), "--json"]


def timed_run(command: list[str], tree: Path) -> tuple[float, dict]:
    """(wall seconds, the printed JSON summary) of one run of `command` in `tree`."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return time.perf_counter() - start, json.loads(done.stdout.strip().splitlines()[-1])


def extract(commit: str, into: Path) -> None:
    """Write `commit`'s tree into the folder `into`."""
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="1534e7e", help="the older commit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--policy", default="atlas")
    parser.add_argument("--programs", type=int, default=400)
    parser.add_argument("--rate", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", metavar="NAME", type=record_name,
                        help="write the figures as the REPORT record NAME "
                             "(bench/results/report/NAME.json)")
    args = parser.parse_args(argv)
    commit = current_commit(REPO)  # before the runs: what was measured
    command = sim_command(args)
    print("command: python -m server.cli", " ".join(command[3:]))
    mismatched: set[str] = set()
    # tree -> "process" or "simulate" -> seconds per round
    seconds: dict[str, dict[str, list[float]]] = {
        tree: {"process": [], "simulate": []} for tree in ("base", "head")}
    with tempfile.TemporaryDirectory(prefix="sim_speed_") as folder:
        base_tree = Path(folder)
        extract(args.base, base_tree)
        trees = {"base": base_tree, "head": REPO}
        for round_ in range(args.repeats):
            order = ["base", "head"] if round_ % 2 == 0 else ["head", "base"]
            runs = {name: timed_run(command, trees[name]) for name in order}
            compared, differing = compare(runs["base"][1], runs["head"][1])
            if differing:
                print(f"round {round_ + 1}: figures that differ (base -> head):\n"
                      + differences(runs["base"][1], runs["head"][1], differing))
            mismatched.update(differing)
            for name in trees:
                seconds[name]["process"].append(runs[name][0])
                seconds[name]["simulate"].append(runs[name][1]["sim_wall_seconds"])
            base, head = (
                {kind: times[-1] for kind, times in seconds[name].items()} for name in trees)
            print(f"round {round_ + 1} ({' then '.join(order)}): base {base['process']:.1f} s, "
                  f"head {head['process']:.1f} s, ratio {base['process'] / head['process']:.2f}x; "
                  f"simulate() alone (sim_wall_seconds) base {base['simulate']:.1f} s, head "
                  f"{head['simulate']:.1f} s, ratio {base['simulate'] / head['simulate']:.2f}x")
    ratios, sim_ratios = ([b / h for b, h in zip(seconds["base"][kind], seconds["head"][kind])]
                          for kind in ("process", "simulate"))
    for what, values in (("ratio base/head", ratios), ("simulate() alone", sim_ratios)):
        print(f"{what}: min {min(values):.2f}x, median {statistics.median(values):.2f}x, "
              f"max {max(values):.2f}x")
    fastest = {kind: min(seconds["base"][kind]) / min(seconds["head"][kind])
               for kind in ("process", "simulate")}
    print(f"fastest runs, base/head: process {fastest['process']:.2f}x, simulate() alone "
          f"{fastest['simulate']:.2f}x")
    print(f"compared {len(compared)} figures: {', '.join(compared)}")
    if args.record:
        _write_record(args, sys.argv[1:] if argv is None else argv, commit, ratios, sim_ratios,
                      fastest, compared, sorted(mismatched))
    if mismatched:
        print(f"DIFFERENT: {', '.join(sorted(mismatched))}")
        return 1
    print("identical")
    return 0


def _write_record(args: argparse.Namespace, argv: Sequence[str], commit: str,
                  ratios: list[float], sim_ratios: list[float], fastest: dict[str, float],
                  compared: list[str], differing: list[str]) -> None:
    workload = (f"{args.workload}, {args.programs} programs at {args.rate:g}/s, seed "
                f"{args.seed} (bench sim)")
    rows = record_rows(args.base, workload, args.policy, ratios, sim_ratios, fastest, compared,
                       differing)
    study = sim_speed_study(args.record, args.base,
                            "python -m bench.studies.sim_speed " + " ".join(argv), commit,
                            datetime.date.today().isoformat(), cpu_model(), rows)
    print(f"wrote {write_study(study, REPO / DEFAULT_FOLDER)}")


if __name__ == "__main__":
    sys.exit(main())
