"""The latency frontier: `python -m bench.studies.latency_frontier --workload W --rate R
[--seeds 0,1,2] [--variants A,B] [--warmup-programs N] [--window-programs N]
[--tail-programs N] --out DIR`.

What a policy's settings trade: each variant (a scheduler policy with its anti-starvation
`starvation_beta` and first-token deadline `ttft_slo_tokens`, `VARIANTS`) runs at one rate at
steady state (`bench.analysis.steady_state.run_steady_point`, one point per seed), and its
window's programs give the mean normalised latency against two figures of their calls: the
TTFT P99 and the P99 inter-token gap (`bench.sim.token_gaps`). Writes
`frontier_<workload>.md` (the command, one row per variant and seed, and per seed whether
`agentix serve`'s default sits at or beyond MLFQ's point in both dimensions),
`frontier_<workload>.json` (the rows) and `frontier_<workload>.png` (the two planes).
The baselines run with their own settings (`bench.sim.baselines`), as in every table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from bench.analysis.steady_state import (DEFAULT_TAIL_PROGRAMS, DEFAULT_WARMUP_PROGRAMS,
                                         DEFAULT_WINDOW_PROGRAMS, SteadyConfig, TracePrefixes,
                                         run_steady_point)
from bench.sim.workloads import WORKLOADS
from bench.studies.frontier_report import FrontierRow, write_frontier
from server.config_flags import name_list, positive_float

# name -> (policy, engine overrides). Beta 4 and a first-token deadline of 2,048 tokens are
# the engine's defaults (with gittins, its default policy); the baselines run without a
# deadline.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "optimized": ("optimized", {}),
    "optimized-mem": ("optimized-mem", {}),
    "mlfq": ("mlfq", {}),
    "pfcfs": ("pfcfs", {}),
    "atlas-beta1": ("atlas", {"starvation_beta": 1.0}),
    "atlas": ("atlas", {}),
    "atlas-beta16": ("atlas", {"starvation_beta": 16.0}),
    "gittins-beta1": ("gittins", {"starvation_beta": 1.0}),
    "gittins": ("gittins", {}),
    "gittins-beta16": ("gittins", {"starvation_beta": 16.0}),
    "gittins-ttft512": ("gittins", {"ttft_slo_tokens": 512}),
    "gittins-ttft2048": ("gittins", {"ttft_slo_tokens": 2048}),
    "gittins-ttft8192": ("gittins", {"ttft_slo_tokens": 8192}),
    "gittins-beta1-ttft2048": ("gittins", {"starvation_beta": 1.0, "ttft_slo_tokens": 2048}),
    "gittins-beta16-ttft2048": ("gittins", {"starvation_beta": 16.0, "ttft_slo_tokens": 2048}),
}
SERVE_DEFAULT = "gittins-ttft2048"


def run_frontier(workload: str, rate: float, seeds: Sequence[int], variants: Sequence[str],
                 config: SteadyConfig, progress: bool = True) -> list[FrontierRow]:
    """One steady-state point per variant and seed, in (seed, variant) order."""
    rows = []
    bar = tqdm(total=len(seeds) * len(variants), desc=f"frontier {workload}", unit="run",
               disable=not progress)
    try:
        for seed in seeds:
            base = TracePrefixes(workload, seed).first(config.total_programs(rate))
            for name in variants:
                policy, overrides = VARIANTS[name]
                bar.set_postfix_str(f"{name}, seed {seed}")
                steady = run_steady_point(workload, base, seed, policy, rate, config,
                                          engine_overrides=overrides or None)
                rows.append(FrontierRow.of(name, steady))
                bar.update(1)
    finally:
        bar.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.latency_frontier",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--rate", type=positive_float, required=True)
    parser.add_argument("--seeds", type=lambda text: [int(s) for s in text.split(",")],
                        default=[0], help="comma-separated (default 0)")
    parser.add_argument("--variants", type=lambda text: name_list(text, VARIANTS, "variants"),
                        default=list(VARIANTS), help="comma-separated names of VARIANTS "
                        "(default: all)")
    parser.add_argument("--warmup-programs", type=int, default=DEFAULT_WARMUP_PROGRAMS)
    parser.add_argument("--window-programs", type=int, default=DEFAULT_WINDOW_PROGRAMS)
    parser.add_argument("--tail-programs", type=int, default=DEFAULT_TAIL_PROGRAMS)
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        config = SteadyConfig(args.warmup_programs, args.window_programs, args.tail_programs)
    except ValueError as exc:
        parser.error(str(exc))
    rows = run_frontier(args.workload, args.rate, args.seeds, args.variants, config,
                        progress=not args.no_progress)
    command = "python -m bench.studies.latency_frontier " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    md_path = write_frontier(rows, args.workload, args.rate, config, Path(args.out), command,
                             SERVE_DEFAULT)
    Path(args.out, f"frontier_{args.workload}.json").write_text(
        json.dumps([row.to_dict() for row in rows], indent=1))
    print(md_path.read_text())


if __name__ == "__main__":
    main()
