"""What inferring programs from conversations recovers against explicit program ids, in the
simulator (virtual time: the machine does not matter).

    python -m bench.studies.inferred_programs [--load moderate|capacity|burst] [--seed 0]
        [--policy gittins] [--workloads sharegpt,bfcl,lats,mixed]

Per workload, one trace (LOADS: programs, and their rate per second) runs four times side
by side, one per way calls get their programs (`bench.sim.client_programs`): the trace's own
ids (`explicit`), the same ids never ended (`named`: a client that sends `X-Program-Id`
and never ends its programs), the programs the HTTP door's `--infer-programs` rule infers
from the prompts (`inferred`), and none (`none`: one-call programs, what an unmodified chat
client gets without the flag). `capacity`: the highest rate at which gittins held a steady
state (the bottom of its capacity bracket in bench/REPORT.md, the capacity_* studies, and
bench/notes/2026-12-01-learnt-scheduling.md, "The capacity table at both targets");
`moderate`: about 3/4 of it; `burst`: past it, with more programs than the
engine's 256 seats, so that calls queue. Prints one markdown table: the
mean and P99 program-level normalized latency of each (always per trace program), their
ratios to `explicit`, and how the inferred run assigned the calls.
"""

from __future__ import annotations

import argparse
import importlib

from bench.sim.baselines import BASELINES
from bench.sim.client_programs import PROGRAM_IDS
from bench.sim.metrics import compute_metrics
from bench.sim.simulate import simulate
from server.config_flags import name_list

# load -> workload -> (programs, arrivals per second)
LOADS = {"moderate": {"sharegpt": (200, 6.0), "bfcl": (200, 5.0), "lats": (200, 0.5),
                      "mixed": (200, 1.5)},
         "capacity": {"sharegpt": (200, 8.0), "bfcl": (200, 6.73), "lats": (200, 0.707),
                      "mixed": (200, 2.0)},
         "burst": {"sharegpt": (600, 12.0), "bfcl": (600, 10.0), "lats": (300, 1.41),
                   "mixed": (600, 3.0)}}
WORKLOADS = tuple(LOADS["moderate"])


def compare(workload: str, programs: int, rate: float, seed: int, policy: str) -> str:
    """One table row: the runs of one trace of `workload`, one per way of program ids."""
    trace = importlib.import_module(f"bench.sim.workloads.{workload}").generate(
        programs, seed, rate)
    runs = {mode: simulate(trace, policy, program_ids=mode) for mode in PROGRAM_IDS}
    metrics = {mode: compute_metrics(run.programs) for mode, run in runs.items()}
    base = metrics["explicit"]
    cells = [f"{m.mean_norm_latency:.4f} / {m.p99_norm_latency:.4f}" for m in metrics.values()]
    ratios = [f"{metrics[mode].mean_norm_latency / base.mean_norm_latency:.3f} / "
              f"{metrics[mode].p99_norm_latency / base.p99_norm_latency:.3f}"
              for mode in PROGRAM_IDS[1:]]
    counts = runs["inferred"].extra["inferred_programs"]
    calls = counts["calls"]
    assigned = (f"{counts['correct'] / calls:.1%} ({counts['split']} split, "
                f"{counts['false_join']} false; {counts['programs']} programs)")
    return (f"| {workload} | {programs} @ {rate:g}/s | {calls} | {' | '.join(cells)} | "
            f"{' | '.join(ratios)} | {assigned} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.inferred_programs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", choices=sorted(LOADS), default="moderate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", choices=sorted(BASELINES), default="gittins")
    parser.add_argument("--workloads", type=lambda t: name_list(t, WORKLOADS, "workloads"),
                        default=list(WORKLOADS))
    args = parser.parse_args(argv)
    print(f"{args.policy}, {args.load} load, seed {args.seed}; program-level normalized "
          f"latency mean / P99 in s/token, ratios mean / P99")
    print("| workload | programs | calls | " + " | ".join(PROGRAM_IDS) + " | "
          + " | ".join(f"{mode} / explicit" for mode in PROGRAM_IDS[1:])
          + " | calls in their program (inferred) |")
    print("|" + " --- |" * (2 * len(PROGRAM_IDS) + 3))
    for workload in args.workloads:
        programs, rate = LOADS[args.load][workload]
        print(compare(workload, programs, rate, args.seed, args.policy), flush=True)


if __name__ == "__main__":
    main()
