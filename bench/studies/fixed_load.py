"""Fixed-load comparisons at 0.7, 0.85 and 0.95 of a workload's knee, on three seeds, with
intervals (issue 39, items 2 and 4; the method: `bench.analysis.fixed_load`).

    python -m bench.studies.fixed_load knee --workload W [--policy optimized] [--start-rate R]
        [--iterations 2] [--arrivals A] [--memory-pressure P] [--warmup-seconds S]
        [--window-programs N] [--record NAME]
    python -m bench.studies.fixed_load run --workload W --knee K --name NAME
        [--knee-source TEXT] [--policies defaults,pfcfs,...] [--fractions 0.7,0.85,0.95]
        [--seeds 0,1,2] [--arrivals A] [--memory-pressure P] [--out bench/results/fixed_load]
        [--reuse OLD.runs.json] [--jobs N]
    python -m bench.studies.fixed_load report --runs bench/results/fixed_load/NAME.runs.json

`knee` prints the highest steady rate of `--policy` (default `optimized`) on `--seed` (0);
`--record NAME` also writes it as the policy's row of the REPORT record
`fixed_load_knees_NAME` (one record per set of searches differing only in policy and start
rate: `bench.analysis.knee_record`).
`run` simulates every (seed, fraction, policy) and saves each run as it ends in
`NAME.runs.json` (with the command, commit and settings), then writes the report `NAME.md`
beside it and the study's rows for bench/REPORT.md
(`bench/results/report/fixed_load_NAME.json`). `report` rewrites both from a saved runs file.
`run --reuse OLD.runs.json` takes the runs an earlier study with the same settings has (to
add a policy without simulating the others again; the saved file may be the one rewritten).
`run --jobs N` simulates N runs at once, each in its own process: the same runs (the simulator
is deterministic), saved as they end and rewritten in order at the end; each run's
`sim_wall_seconds` then shares the machine.
Simulated A100-80GB + Llama-3.1-8B unless `--preset`/`--model` say. Workloads whose programs
last minutes (`coding_swe`, `mapreduce`) need a warm-up of at least twice their time in system
and a long tail (`--warmup-seconds 1000`/`2000 --tail-seconds 5000`: with the default 600 s
tail most of their runs end "did not drain"); on-off bursts need a window of many cycles
(`--window-programs 1000`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from bench.analysis.fixed_load import (ALL, FLAT_GROWTH, FRACTIONS, SEEDS, FixedLoadConfig,
                                       FixedRun, default_steady, find_knee, run_fixed_load)
from bench.analysis.fixed_load_report import FIGURES, FixedLoadRuns, backlog_cells, markdown
from bench.analysis.knee_record import knee_row, merged_record, record_command
from bench.analysis.parallel_runs import add_jobs_argument
from bench.analysis.steady_state import SteadyConfig
from bench.report.records import (DEFAULT_FOLDER, ReportRow, ReportStudy, current_commit,
                                  record_name, study_from_json, write_study)
from bench.sim.arrivals import parse_arrivals
from bench.sim.baselines import BASELINES, BLOCK_SIZE, DEFAULTS
from bench.sim.cost_model import GPU_PRESETS, MODEL_PRESETS
from bench.sim.memory_pressure import kv_block_overrides, parse_memory_pressure
from bench.sim.workloads import WORKLOADS
from server.config_flags import name_list, positive_float

REPO = Path(__file__).resolve().parents[2]
POLICIES = (DEFAULTS, "pfcfs", "mlfq", "atlas", "optimized", "optimized-mem", "vllm06")
# Compared with every other policy of a study: the engine's defaults, and its order alone
# (`gittins`: the default policy with the baselines' common settings).
OURS = (DEFAULTS, "gittins")
DEFAULT_OUT = Path("bench/results/fixed_load")
NOTES = "bench/notes/2026-12-06-fixed-load.md"


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def _policies(text: str) -> tuple[str, ...]:
    return tuple(name_list(text, (DEFAULTS, *BASELINES), "policies"))


def _checked(parse, text: str):
    try:
        return parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--arrivals", type=lambda t: _checked(parse_arrivals, t),
                        default=parse_arrivals("poisson"))
    parser.add_argument("--memory-pressure", type=lambda t: _checked(parse_memory_pressure, t),
                        default=1.0, help="fraction of the preset's KV blocks (1/4, 1/8)")
    parser.add_argument("--preset", choices=sorted(GPU_PRESETS), default="a100-80g")
    parser.add_argument("--model", choices=sorted(MODEL_PRESETS), default="llama-3.1-8b")
    steady = default_steady()
    parser.add_argument("--warmup-seconds", type=float, default=steady.warmup_seconds)
    parser.add_argument("--window-programs", type=int, default=steady.window_programs)
    parser.add_argument("--tail-seconds", type=float, default=steady.tail_seconds)


def _steady(args: argparse.Namespace) -> SteadyConfig:
    return SteadyConfig(window_programs=args.window_programs,
                        warmup_seconds=args.warmup_seconds, tail_seconds=args.tail_seconds)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return kv_block_overrides(args.memory_pressure, args.preset, args.model, BLOCK_SIZE)


def _knee(args: argparse.Namespace, argv: Sequence[str]) -> None:
    knee, points = find_knee(args.workload, _steady(args), args.start_rate, args.iterations,
                             args.seed, args.arrivals, args.preset, args.model,
                             _overrides(args) or None, args.policy)
    for p in points:
        state = "overloaded" if p.overloaded else f"steady, mean {p.mean_norm_latency:.4f}"
        print(f"rate {p.rate:.4g}: {state} ({p.sim_wall_seconds:.0f} s)")
    print(f"knee: {knee if knee is None else f'{knee:.4g}'} programs/s")
    if args.record is None:
        return
    if knee is None:
        raise SystemExit(f"fixed_load: no steady rate found, --record {args.record} unchanged")
    name = f"fixed_load_knees_{args.record}"
    path = REPO / DEFAULT_FOLDER / f"{name}.json"
    existing = study_from_json(json.loads(path.read_text())) if path.exists() else None
    row = knee_row(args.workload, args.policy, args.seed, args.start_rate, knee, points,
                   current_commit(REPO))
    study = merged_record(existing, row, name=name, title=f"Knees: {args.record}",
                          command=record_command(argv), date=datetime.date.today().isoformat(),
                          machine=f"simulated {args.preset} + {args.model}, one engine "
                                  f"(virtual time)", notes=NOTES)
    print(f"wrote {write_study(study, REPO / DEFAULT_FOLDER)}")


def _run(args: argparse.Namespace, argv: Sequence[str]) -> None:
    config = FixedLoadConfig(args.knee, args.fractions, args.seeds, _steady(args),
                             args.flat_growth)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    saved = {"name": args.name, "workload": args.workload,
             "command": "python -m bench.studies.fixed_load " + shlex.join(argv),
             "commit": current_commit(REPO), "date": datetime.date.today().isoformat(),
             "knee": args.knee, "knee_source": args.knee_source, "preset": args.preset,
             "model": args.model, "arrivals": args.arrivals.spec,
             "memory_pressure": args.memory_pressure, "policies": list(args.policies),
             "config": {**asdict(config), "steady": asdict(config.steady)}, "runs": []}
    path = out / f"{args.name}.runs.json"

    def save(run: FixedRun) -> None:
        saved["runs"].append(run.to_dict())
        path.write_text(json.dumps(saved, indent=1) + "\n")
        flat = "flat" if run.flat else "NOT flat"
        print(f"seed {run.seed} {run.fraction:g} x knee {run.policy}: {run.verdict}, growth "
              f"{run.backlog_growth:+.3f} ({flat}), {run.sim_wall_seconds:.0f} s", flush=True)

    before = reusable_runs(Path(args.reuse), saved) if args.reuse else {}
    runs = run_fixed_load(args.workload, args.policies, config, args.arrivals, args.preset,
                          args.model, _overrides(args) or None, on_run=save,
                          done_before=before, jobs=args.jobs)
    saved["runs"] = [run.to_dict() for run in runs]  # in order, however they ended
    path.write_text(json.dumps(saved, indent=1) + "\n")
    _write_outputs(path)


SAME_SETTINGS = ("workload", "knee", "preset", "model", "arrivals", "memory_pressure")


def reusable_runs(path: Path, settings: dict[str, Any]) -> dict[tuple[int, float, str], FixedRun]:
    """The runs of a saved study whose settings are `settings`' (ValueError naming the
    first that differs), by (seed, fraction, policy)."""
    old, runs = load_runs(path)
    for name in SAME_SETTINGS:
        if old[name] != settings[name]:
            raise ValueError(f"--reuse {path}: {name} is {old[name]!r} there, "
                             f"{settings[name]!r} here")
    for name in ("steady", "flat_growth"):
        if old["config"][name] != settings["config"][name]:
            raise ValueError(f"--reuse {path}: config.{name} is {old['config'][name]!r} "
                             f"there, {settings['config'][name]!r} here")
    return {(r.seed, r.fraction, r.policy): r for r in runs}


def load_runs(path: Path) -> tuple[dict[str, Any], list[FixedRun]]:
    """A saved runs file: its settings and its runs."""
    saved = json.loads(Path(path).read_text())
    return saved, [FixedRun.from_dict(r) for r in saved["runs"]]


def _header(saved: dict[str, Any]) -> str:
    steady = saved["config"]["steady"]
    load = f"arrivals {saved['arrivals']}, memory {saved['memory_pressure']:g} of the KV blocks"
    return (f"# Fixed load: {saved['name']}\n\n```\n{saved['command']}\n```\n\n"
            f"Commit {saved['commit']}, {saved['date']}; {saved['workload']}, simulated "
            f"{saved['preset']} + {saved['model']}, {load}. Knee {saved['knee']:g} programs/s "
            f"({saved['knee_source']}); loads are fractions of it. Warm-up "
            f"{steady['warmup_seconds']:g} s of arrivals, window {steady['window_programs']} "
            f"programs, tail {steady['tail_seconds']:g} s; flat: backlog growth within "
            f"+-{saved['config']['flat_growth']:g}. Intervals: 95% Student t over the seeds "
            f"(ratios paired by seed). Latencies in s/token, TTFT in s.")


def report_rows(saved: dict[str, Any], runs: FixedLoadRuns,
                ours: Sequence[str]) -> list[ReportRow]:
    """The study's REPORT rows: every policy's flat runs (each seed's backlog growth in the
    note) and figures over all programs at every load, and each of `ours` / every other
    policy, paired by seed, with its verdict (none when no run was flat)."""
    rows = []
    labels = dict(FIGURES)
    for fraction in runs.fractions:
        for policy in runs.policies:
            cells, flat = backlog_cells(runs, fraction, policy)
            rows.append(ReportRow(f"{fraction:g}.{policy}.flat_runs", saved["workload"], policy,
                                  f"flat runs of {len(runs.seeds)} seeds at {fraction:g} x knee",
                                  flat, note=f"backlog growth per seed: {', '.join(cells)}"))
            for name, label in FIGURES:
                value = runs.figure(fraction, policy, ALL, name)
                if value is None:
                    continue
                interval = {} if value.n < 2 else {"low": value.low, "high": value.high}
                rows.append(ReportRow(f"{fraction:g}.{policy}.{name}", saved["workload"],
                                      policy, f"{label} at {fraction:g} x knee", value.mean,
                                      note=f"{value.n} seeds", **interval))
    comparisons = [c for mine in ours for c in runs.comparisons(mine)]
    for c in comparisons:
        if c.klass != ALL or c.ratio is None:
            continue
        interval = {} if c.ratio.n < 2 else {"low": c.ratio.low, "high": c.ratio.high}
        rows.append(ReportRow(f"{c.fraction:g}.{c.ours}-vs-{c.theirs}.{c.figure}",
                              saved["workload"], c.ours,
                              f"{labels[c.figure]} ratio {c.ours} / {c.theirs} at "
                              f"{c.fraction:g} x knee", c.ratio.mean,
                              note=f"{c.verdict}, {c.ratio.n} seeds", **interval))
    return rows


def _write_outputs(path: Path) -> None:
    saved, runs = load_runs(path)
    table = FixedLoadRuns(runs)
    md = path.with_name(f"{saved['name']}.md")
    ours = [p for p in OURS if p in table.policies] or table.policies[:1]
    md.write_text(markdown(table, ours, _header(saved)))
    rows = report_rows(saved, table, ours)
    study = ReportStudy(
        name=f"fixed_load_{saved['name']}", title=f"Fixed load: {saved['name']}",
        command=saved["command"], commit=saved["commit"], date=saved["date"],
        machine=f"simulated {saved['preset']} + {saved['model']}", notes=NOTES,
        rows=tuple(rows))
    print(f"wrote {md} and {write_study(study, REPO / DEFAULT_FOLDER)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.fixed_load",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    knee = sub.add_parser("knee", help="the highest steady rate of a policy on one seed")
    _add_load_arguments(knee)
    knee.add_argument("--policy", choices=[DEFAULTS, *BASELINES], default="optimized")
    knee.add_argument("--start-rate", type=positive_float, default=1.0)
    knee.add_argument("--iterations", type=int, default=2)
    knee.add_argument("--seed", type=int, default=0)
    knee.add_argument("--record", type=record_name, default=None, metavar="NAME",
                      help="add the knee as policy's row of the REPORT record "
                           "fixed_load_knees_NAME (made if absent)")
    run = sub.add_parser("run", help="every policy at fractions of the knee on every seed")
    _add_load_arguments(run)
    run.add_argument("--knee", type=float, required=True, help="programs/s")
    run.add_argument("--knee-source", default="given", help="where the knee comes from")
    run.add_argument("--name", type=record_name, required=True,
                     help="file stem of the outputs ([a-z0-9_]+)")
    run.add_argument("--policies", type=_policies, default=POLICIES)
    run.add_argument("--fractions", type=_floats, default=FRACTIONS)
    run.add_argument("--seeds", type=_ints, default=SEEDS)
    run.add_argument("--flat-growth", type=float, default=FLAT_GROWTH)
    run.add_argument("--out", default=str(DEFAULT_OUT))
    add_jobs_argument(run, "runs")
    run.add_argument("--reuse", default=None, metavar="RUNS_JSON",
                     help="take the runs this saved study (same settings) already has "
                          "instead of simulating them again (the simulator is deterministic)")
    report = sub.add_parser("report", help="rewrite a study's report from its runs file")
    report.add_argument("--runs", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        if args.command == "knee":
            _knee(args, argv)
        elif args.command == "run":
            _run(args, argv)
        else:
            _write_outputs(Path(args.runs))
    except ValueError as error:
        raise SystemExit(f"fixed_load: {error}") from None


if __name__ == "__main__":
    main()
