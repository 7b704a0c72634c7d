"""`agentix bench ...`: benchmark commands. `agentix bench sim` replays a generated workload
through the engine with the simulated executor and prints program-level metrics; `agentix bench
sweep` runs several policies over several arrival rates and reports each policy's capacity;
`agentix bench capacity` searches each policy's capacity at a relative and a fixed latency
target by bracketing and bisection, at steady state (`bench.analysis.steady_state`: a measurement
window under continuing arrivals, several seeds) unless `--finite-trace` asks for the old replay of
one finite trace;
`agentix bench sensitivity` varies one scheduler knob at a time;
`agentix bench calibrate` fits the cost model to the real engine on this machine and checks the
simulator against the real engine on a scaled-down trace. `sim`, `sweep` and `capacity` take
`--replicas N --placement P [--cutoff TOKENS|auto]` to run N engines on one virtual clock behind
a placement policy (`bench.sim.multi_sim`)."""

from __future__ import annotations

import argparse
import importlib
import json
import math
from typing import TYPE_CHECKING, Any

from bench.analysis.parallel_runs import add_jobs_argument
from bench.sim.arrivals import ArrivalProcess, parse_arrivals, retime
from bench.sim.baselines import BASELINES, BLOCK_SIZE, DEFAULTS
from bench.sim.client_programs import PROGRAM_IDS
from bench.sim.cost_model import GPU_PRESETS, MODEL_PRESETS
from bench.sim.hot_tenant import HOT_PREFIX_TOKENS, hot_tenant
from bench.sim.memory_pressure import kv_block_overrides, parse_memory_pressure
from bench.sim.metrics import compute_metrics, metrics_by_workload
from bench.sim.workloads import WORKLOADS
from server.config_flags import (name_list, parse_cutoff, parse_override,
                                  parse_placement_option, positive_float)

if TYPE_CHECKING:
    from pathlib import Path

    from bench.analysis.capacity import LatencyTarget

FIXED_TARGET = 0.3  # s/token: `capacity`'s second latency target


def _nonnegative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be finite and >= 0, got {text}")
    return value


def _nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        raise argparse.ArgumentTypeError(f"seeds must be a comma-separated list of integers, "
                                         f"got {text!r}")
    return list(dict.fromkeys(seeds))


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _add_replica_arguments(parser: argparse.ArgumentParser) -> None:
    """`--replicas`, `--placement`, `--cutoff`: run N engines on one virtual clock behind a
    placement policy (`bench.sim.multi_sim`); without either of the first two, one engine."""
    from scheduler.placement import DEFAULT_CUTOFF, DEFAULT_PLACEMENT, PLACEMENTS

    parser.add_argument("--replicas", type=_positive_int, default=1,
                        help="engine replicas behind the placement (default 1: one engine)")
    parser.add_argument("--placement", choices=sorted(PLACEMENTS), default=None,
                        help=f"placement policy across replicas (default {DEFAULT_PLACEMENT} "
                             "when --replicas > 1)")
    parser.add_argument("--cutoff", type=parse_cutoff, default=DEFAULT_CUTOFF,
                        help=f"the cutoff placement's prompt-length cutoff in tokens, or "
                             f"'auto' (adaptive; default {DEFAULT_CUTOFF})")
    parser.add_argument("--placement-option", action="append", default=[],
                        type=parse_placement_option, metavar="NAME=VALUE",
                        help="an option of the placement (e.g. queue_weight=0.02 for agentix; "
                             "repeatable; see scheduler/placement/)")




def _replica_options(args: argparse.Namespace) -> dict[str, Any]:
    """The multi-engine keywords of `args` (`bench.sim.multi_sim.replica_options`); `--kv-events`
    and `--replica-speeds` where the command has them (SystemExit naming a bad combination)."""
    from bench.sim.multi_sim import replica_options

    try:
        return replica_options(args.replicas, args.placement, args.cutoff,
                               dict(args.placement_option), getattr(args, "kv_events", False),
                               getattr(args, "replica_speeds", None))
    except ValueError as error:
        raise SystemExit(f"agentix bench {args.bench_command}: {error}") from None


def _add_replica_state_arguments(parser: argparse.ArgumentParser) -> None:
    """`--kv-events` and `--replica-speeds` (for `sim` and `capacity`)."""
    parser.add_argument("--kv-events", action="store_true",
                        help="with --replicas: the replicas report their prefix caches (KV "
                             "events), which placement uses instead of guessing")
    parser.add_argument("--replica-speeds", type=_speed_list, default=None,
                        metavar="S1,S2,...",
                        help="with --replicas: each replica's relative speed (its steps take "
                             "1/S as long; e.g. 1,1,1,0.5: the last at half speed)")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _arrivals(text: str) -> ArrivalProcess:
    try:
        return parse_arrivals(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _memory_pressure(text: str) -> float:
    try:
        return parse_memory_pressure(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_arrivals_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arrivals", type=_arrivals, default=parse_arrivals("poisson"),
                        metavar="poisson|gamma[:CV]|onoff[:BURST,ON_FRACTION,CYCLE]",
                        help="program arrival process at the mean rate (bench/sim/arrivals.py; "
                             "default poisson: the generator's own draws)")


def _add_memory_pressure_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-pressure", type=_memory_pressure, default=1.0,
                        metavar="1/4|1/8|F",
                        help="keep this fraction of the preset's device KV blocks (bench/sim/"
                             "memory_pressure.py; default 1; --set num_kv_blocks wins)")


def _engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """`--memory-pressure`'s `num_kv_blocks`, then `--set`'s fields over it."""
    fields = dict(args.set)
    try:
        kv = kv_block_overrides(args.memory_pressure, args.preset, args.model,
                                fields.get("block_size", BLOCK_SIZE))
    except ValueError as error:
        raise SystemExit(f"agentix bench {args.bench_command}: {error}") from None
    return {**kv, **fields}


def _load_text(args: argparse.Namespace) -> str:
    """", arrivals gamma:1.41" and ", memory 1/4" for a run off the defaults; else ""."""
    arrivals = "" if args.arrivals.spec == "poisson" else f", arrivals {args.arrivals.spec}"
    pressure = getattr(args, "memory_pressure", 1.0)
    return arrivals + ("" if pressure == 1 else f", memory {pressure:g} of the KV blocks")


def _speed_list(text: str) -> tuple[float, ...]:
    return tuple(positive_float(v) for v in text.split(","))


def _replicas_text(multi: dict[str, Any]) -> str:
    """", on 4 replicas behind least_loaded" (and the cutoff for `cutoff`); "" for one engine."""
    if not multi:
        return ""
    cutoff = f" (cutoff {multi['cutoff']})" if multi["placement"] == "cutoff" else ""
    events = ", KV events" if multi.get("kv_events") else ""
    speeds = (f", speeds {','.join(f'{v:g}' for v in multi['replica_speeds'])}"
              if multi.get("replica_speeds") else "")
    return (f", on {multi['replicas']} replicas behind {multi['placement']}{cutoff}{events}"
            f"{speeds}")


def _sim(args: argparse.Namespace) -> None:
    from bench.sim.multi_sim import simulate_replicas
    from bench.sim.simulate import simulate

    generator = importlib.import_module(f"bench.sim.workloads.{args.workload}")
    trace = retime(generator.generate(args.programs, args.seed, args.rate), args.arrivals,
                   args.rate, args.seed)
    overrides = _engine_overrides(args)
    if args.hot_tenant is not None:
        trace = hot_tenant(trace, args.hot_tenant, seed=args.seed)
    multi = _replica_options(args)
    if multi and args.program_ids != "explicit":
        raise SystemExit("agentix bench sim: --program-ids: one engine only (not with "
                         "--replicas/--placement)")
    if multi:
        result = simulate_replicas(trace, args.policy, preset=args.preset, model=args.model,
                                   engine_overrides=overrides or None, **multi)
    else:
        result = simulate(trace, args.policy, preset=args.preset, model=args.model,
                          engine_overrides=overrides or None,
                          program_ids=args.program_ids)
    metrics = compute_metrics(result.programs)
    summary = {
        "workload": args.workload, "policy": args.policy, "rate": args.rate,
        "programs": args.programs, "seed": args.seed, "overrides": dict(args.set),
        "hot_tenant": args.hot_tenant, "program_ids": args.program_ids,
        "arrivals": args.arrivals.spec, "memory_pressure": args.memory_pressure,
        "preset": result.preset,
        "model": result.model, **metrics.to_dict(),
        "ttft_p50_s": result.ttft_percentile(50), "ttft_p99_s": result.ttft_percentile(99),
        "itl_p50_s": result.itl_percentile(50), "itl_p99_s": result.itl_percentile(99),
        "num_calls": len(result.call_finish), "num_steps": result.num_steps,
        "num_tokens_computed": result.num_tokens_computed,
        "prefill_tokens_computed": result.prefill_tokens_computed,
        "num_preemptions": result.num_preemptions,
        "num_swap_outs": result.num_swap_outs, "swap_seconds": result.swap_seconds,
        "num_kv_blocks": result.num_kv_blocks, "sim_wall_seconds": result.wall_seconds,
        "scheduler_stats": result.scheduler_stats,
    }
    summary["by_workload"] = {name: m.to_dict()
                              for name, m in metrics_by_workload(result.programs).items()}
    if multi:
        summary["cutoff"] = multi["cutoff"]
    summary.update(result.extra)  # a multi-replica or an inferred-programs run's figures
    if args.json:
        print(json.dumps(summary))
        return
    tenant = f", hot tenant {args.hot_tenant:g}" if args.hot_tenant is not None else ""
    ids = f", program ids {args.program_ids}" if args.program_ids != "explicit" else ""
    print(f"{args.workload} x {args.programs} programs at {args.rate}/s "
          f"(seed {args.seed}{tenant}), policy {args.policy}, {result.model} on {result.preset} "
          f"({result.num_kv_blocks} KV blocks){_replicas_text(multi)}{ids}{_load_text(args)}")
    print(f"  programs completed   {metrics.programs_completed}")
    if "inferred_programs" in result.extra:
        counts = result.extra["inferred_programs"]
        print(f"  inferred programs    {counts['programs']} for {counts['calls']} calls: "
              f"{counts['correct']} in their program, {counts['split']} split off, "
              f"{counts['false_join']} joined another")
    print(f"  norm latency (s/tok) mean {metrics.mean_norm_latency:.4f}  "
          f"P50 {metrics.p50_norm_latency:.4f}  P95 {metrics.p95_norm_latency:.4f}  "
          f"P99 {metrics.p99_norm_latency:.4f}")
    print(f"  throughput           {metrics.throughput_tokens_per_s:.1f} tokens/s "
          f"({metrics.generated_tokens} tokens, makespan {metrics.makespan_s:.1f} s)")
    print(f"  time to first token  P50 {summary['ttft_p50_s']:.3f} s  "
          f"P99 {summary['ttft_p99_s']:.3f} s (per call)")
    print(f"  inter-token gap      P50 {summary['itl_p50_s']:.4f} s  "
          f"P99 {summary['itl_p99_s']:.4f} s (per token, to within 1%)")
    print(f"  engine               {result.num_steps} steps, {result.num_tokens_computed} "
          f"tokens computed ({result.prefill_tokens_computed} prefill), "
          f"{result.num_preemptions} preemptions, {result.num_swap_outs} swap-outs "
          f"({result.swap_seconds:.2f} s)")
    print("  scheduler            " + ", ".join(f"{name} {value:g}" for name, value
                                                 in result.scheduler_stats.items()))
    for name, m in summary["by_workload"].items():
        print(f"  {name:<20} {m['programs_completed']} programs, norm latency mean "
              f"{m['mean_norm_latency']:.4f}  P95 {m['p95_norm_latency']:.4f}")
    if multi:
        print(f"  prefix cache         {summary['cache_hit_rate']:.1%} of "
              f"{summary['prompt_tokens']} prompt tokens cached; "
              f"{summary['program_moves']} of {summary['placements']} calls placed away "
              "from their program's previous replica")
        for r in summary["per_replica"]:
            print(f"  replica {r['replica']:<12} {r['calls']} calls, cache hit "
                  f"{r['cache_hit_rate']:.1%}, busy {r['busy_seconds']:.1f} s, load tokens "
                  f"max {r['max_load_tokens']} mean {r['mean_load_tokens']:.0f}")
    print(f"  simulated in         {result.wall_seconds:.1f} s")


def _policy_list(text: str) -> list[str]:
    return name_list(text, BASELINES, "policies")


def _rate_list(text: str) -> list[float]:
    try:
        rates = sorted({positive_float(r) for r in text.split(",") if r.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"rates: {exc}") from None
    if not rates:
        raise argparse.ArgumentTypeError(f"rates must be a comma-separated list, got {text!r}")
    return rates


def _sweep(args: argparse.Namespace) -> None:
    import shlex
    import sys
    import time

    from bench.analysis.sweep import sweep
    from bench.analysis.sweep_report import capacity_table, latency_table, write_sweep

    start = time.perf_counter()
    target, how = _target(args)
    multi = _replica_options(args)
    print(f"{args.workload} x {args.programs} programs (seed {args.seed}), {args.model} on "
          f"{args.preset}{_replicas_text(multi)}{_load_text(args)}; latency target "
          f"{target:.4f} s/token ({how})", flush=True)
    points = sweep(args.workload, args.policies, args.rates, args.programs, args.seed,
                   preset=args.preset, model=args.model, progress=not args.no_progress,
                   arrivals=args.arrivals, jobs=args.jobs, **multi)
    print()
    print(latency_table(points))
    print(capacity_table(points, target))
    argv = sys.argv[1:] if args.argv is None else args.argv
    command = "agentix bench " + " ".join(shlex.quote(a) for a in argv)
    md, png = write_sweep(points, target, args.out, command=command)
    print(f"wrote {md} and {png} in {time.perf_counter() - start:.1f} s")


def _model_dir(text: str) -> str:
    from pathlib import Path

    if not (Path(text) / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a model directory (no config.json)")
    return text


def _real_policy_list(text: str) -> list[str]:
    names = _policy_list(text)
    if "oracle" in names:
        raise argparse.ArgumentTypeError("the oracle is simulation-only: it cannot run on the "
                                         "real engine")
    return names


def _scale(text: str) -> float:
    value = float(text)
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_real_run_arguments(parser: argparse.ArgumentParser, programs: int, rate: float,
                           policies: list[str]) -> None:
    """The options of a run of a scaled-down mixed trace on the real engine (`calibrate`,
    `python -m bench.studies.grpc_runs.grpc_run`); `real_run_setup` turns them into the trace
    and engine fields."""
    parser.add_argument("--model-dir", type=_model_dir, default=None,
                        help="HF model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--programs", type=_positive_int, default=programs)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=positive_float, default=rate,
                        help="program arrivals per second (Poisson)")
    parser.add_argument("--scale", type=_scale, default=16.0,
                        help="divide prompt and output lengths by this (>= 1)")
    parser.add_argument("--max-calls", type=_positive_int, default=8, help="calls per program")
    parser.add_argument("--policies", type=_real_policy_list, default=policies,
                        help=f"comma-separated baselines (default: {','.join(policies)})")
    parser.add_argument("--max-num-seqs", type=_positive_int, default=4,
                        help="running calls at most (small, so that calls queue)")
    parser.add_argument("--max-batched-tokens", type=_positive_int, default=256)
    parser.add_argument("--kv-blocks", type=_positive_int, default=256,
                        help="device KV blocks (and as many host blocks)")
    parser.add_argument("--threads", type=_positive_int, default=1, help="torch threads")
    parser.add_argument("--set", type=parse_override, action="append", default=[],
                        metavar="FIELD=VALUE", help="an engine config field for every policy "
                        "(repeatable), e.g. --set retention_rule='ttl'")


def real_run_setup(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Set torch's threads and the default model directory (SmolLM2) on `args`; return the
    scaled-down mixed trace and the engine fields (memory, batch limits) the options ask for,
    and print them."""
    import torch

    from bench.sim.scaled_trace import scale_trace
    from bench.sim.workloads import mixed

    torch.set_num_threads(args.threads)
    if args.model_dir is None:
        from engine.models.smollm2 import ensure_smollm2_dir
        args.model_dir = str(ensure_smollm2_dir())
    trace = scale_trace(mixed.generate(args.programs, args.seed, args.rate), args.scale,
                        args.max_calls)
    fields = dict(block_size=16, num_kv_blocks=args.kv_blocks, num_host_blocks=args.kv_blocks,
                  max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_batched_tokens,
                  **dict(args.set))
    calls = sum(len(p.calls) for p in trace.programs)
    print(f"model {args.model_dir} (float32, CPU, torch.set_num_threads({args.threads}): the "
          f"engine uses {args.threads} core(s), the rest stay free)")
    print(f"trace: mixed x {args.programs} programs at {args.rate}/s (seed {args.seed}), "
          f"lengths / {args.scale:g}, <= {args.max_calls} calls per program ({calls} calls); "
          f"max_num_seqs {args.max_num_seqs}, {args.kv_blocks} KV blocks", flush=True)
    return trace, fields


def _calibrate(args: argparse.Namespace) -> None:
    import shlex
    import sys
    import time

    from bench.analysis.calibration_check import comparison, format_comparison
    from bench.sim.simulate import simulate
    from bench.support import calibrate as cal
    from bench.support.real_run import run_real

    start = time.perf_counter()
    trace, fields = real_run_setup(args)
    samples: list = []
    if args.calibration:
        calibration = cal.load_calibration(args.calibration)
        print(f"calibration read from {args.calibration}")
    else:
        calibration, samples = cal.calibrate(args.model_dir, {**fields, "multistep": 4})
    fit = calibration.fit
    print(f"fit over {fit.num_samples} probe steps ({calibration.seconds:.0f} s): "
          f"flops rate {fit.flops_rate / 1e9:.1f} GFLOP/s, byte rate {fit.byte_rate / 1e9:.1f} "
          f"GB/s, step overhead {fit.step_overhead * 1e3:.1f} ms, schedule overhead "
          f"{fit.schedule_overhead * 1e3:.1f} ms; step error rms {fit.rms_rel_error:.1%}, "
          f"max {fit.max_rel_error:.1%}; swaps {calibration.host_link_bandwidth / 1e9:.1f} GB/s "
          f"+ {calibration.per_transfer_latency * 1e6:.0f} us", flush=True)
    overrides = cal.check_overrides(calibration, **fields)
    checks = []
    for policy in args.policies:
        real = run_real(trace, policy, args.model_dir, overrides)
        sim = simulate(trace, policy, cost_model=calibration.cost_model(),
                       engine_overrides=overrides)
        checks.append(comparison(real, sim))
        print(format_comparison(checks[-1]), flush=True)
    argv = sys.argv[1:] if args.argv is None else args.argv
    command = "agentix bench " + " ".join(shlex.quote(a) for a in argv)
    cal.save_calibration(calibration, args.out, {
        "command": command, "checks": checks,
        "probe_steps": [[s.chunks, s.new_round, s.seconds] for s in samples]})
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


def _target(args: argparse.Namespace) -> tuple[float, str]:
    from bench.analysis.sweep import TARGET_FACTOR, UNLOADED_RATE, latency_target

    if args.target is not None:
        return args.target, "given"
    return (latency_target(args.workload, args.preset, args.model, args.seed, args.programs),
            f"{TARGET_FACTOR:g} x vllm's mean at {UNLOADED_RATE:g} programs/s")


def _capacity_targets(args: argparse.Namespace) -> list[LatencyTarget]:
    """The relative (or `--target`) latency target, then `--fixed-target` unless it is 0."""
    from bench.analysis.capacity import LatencyTarget

    targets = [LatencyTarget(*_target(args))]
    if args.fixed_target:
        targets.append(LatencyTarget(args.fixed_target, "fixed"))
    return targets


def _capacity(args: argparse.Namespace) -> None:
    import time

    start = time.perf_counter()
    targets = _capacity_targets(args)
    multi = _replica_options(args)
    run = _finite_capacity if args.finite_trace else _steady_capacity
    md, png = run(args, targets, multi)
    print(f"wrote {md} and {png} in {time.perf_counter() - start:.1f} s")


def _targets_text(targets: list[LatencyTarget]) -> str:
    return "; ".join(f"{t.seconds_per_token:.4f} s/token ({t.how})" for t in targets)


def _command(args: argparse.Namespace) -> str:
    import shlex
    import sys

    argv = sys.argv[1:] if args.argv is None else args.argv
    return "agentix bench " + " ".join(shlex.quote(a) for a in argv)


def _finite_capacity(args: argparse.Namespace, targets: list[LatencyTarget],
                     multi: dict[str, Any]) -> tuple[Path, Path]:
    """`--finite-trace`: one trace of `--programs` programs replayed at every rate."""
    from bench.analysis.capacity import find_capacities, write_outputs
    from bench.analysis.sweep_report import capacity_table

    if "kv_events" in multi or "replica_speeds" in multi or args.set or \
            args.memory_pressure != 1:
        raise SystemExit("agentix bench capacity: --kv-events, --replica-speeds, "
                         "--memory-pressure and --set are for the steady-state method, not "
                         "--finite-trace")
    print(f"{args.workload} x {args.programs} programs (seed {args.seed}), finite trace, "
          f"{args.model} on {args.preset}{_replicas_text(multi)}{_load_text(args)}; latency "
          f"targets {_targets_text(targets)}", flush=True)
    points = find_capacities(args.workload, args.policies,
                             [t.seconds_per_token for t in targets], args.programs, args.seed,
                             args.start_rate, args.iterations, args.preset, args.model,
                             progress=not args.no_progress,
                             max_expansions=args.max_expansions, arrivals=args.arrivals,
                             jobs=args.jobs, **multi)
    for target in targets:
        print()
        print(capacity_table(points, target.seconds_per_token))
    return write_outputs(points, targets, args.out, _command(args))


def _steady_capacity(args: argparse.Namespace, targets: list[LatencyTarget],
                     multi: dict[str, Any]) -> tuple[Path, Path]:
    """The default: a steady-state search per seed (`bench.analysis.steady_state`)."""
    from bench.analysis.steady_report import (steady_capacity_table, steady_points_table,
                                              window_text, write_steady_outputs)
    from bench.analysis.steady_state import SteadyConfig, find_steady_capacities

    config = SteadyConfig(args.warmup_programs, args.window_programs, args.tail_programs,
                          args.max_backlog_growth, args.warmup_seconds, args.tail_seconds)
    overrides = _engine_overrides(args)
    settings = "".join(f", {field}={value!r}" for field, value in overrides.items())
    print(f"{args.workload} at steady state, seeds {','.join(map(str, args.seeds))}, "
          f"{args.model} on {args.preset}{_replicas_text(multi)}{_load_text(args)}{settings}; "
          f"latency targets {_targets_text(targets)}", flush=True)
    runs = find_steady_capacities(args.workload, args.policies,
                                  [t.seconds_per_token for t in targets], args.seeds, config,
                                  args.start_rate, args.iterations, args.preset, args.model,
                                  progress=not args.no_progress,
                                  engine_overrides=overrides or None,
                                  max_expansions=args.max_expansions,
                                  arrivals=args.arrivals, jobs=args.jobs, **multi)
    print()
    print(steady_points_table(runs))
    print(window_text(config, runs))
    for target in targets:
        print(steady_capacity_table(runs, target.seconds_per_token))
    return write_steady_outputs(runs, targets, config, args.out, _command(args))


def _add_policy_run_arguments(parser: argparse.ArgumentParser, programs: int,
                              out_files: str) -> None:
    """The options `sweep` and `capacity` share: workload, policies, trace, preset, target,
    output folder, progress bar."""
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--policies", type=_policy_list, default=list(BASELINES),
                        help="comma-separated baselines (default: all)")
    parser.add_argument("--programs", type=_positive_int, default=programs)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", choices=sorted(GPU_PRESETS), default="a100-80g")
    parser.add_argument("--model", choices=sorted(MODEL_PRESETS), default="llama-3.1-8b")
    parser.add_argument("--target", type=positive_float, default=None,
                        help="latency target in s/token (default: derived from unloaded vllm)")
    parser.add_argument("--out", default="bench/results", help=f"folder for {out_files}")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_arrivals_argument(parser)
    _add_replica_arguments(parser)


def _add_steady_arguments(parser: argparse.ArgumentParser) -> None:
    """`capacity`'s method: steady state (the default; its window, tail, overload rule and
    seeds) or `--finite-trace` (one trace of `--programs` programs, seed `--seed`)."""
    from bench.analysis import steady_state as ss

    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--steady-state", dest="finite_trace", action="store_false",
                      help="measure in a window of steady load (the default)")
    mode.add_argument("--finite-trace", dest="finite_trace", action="store_true",
                      help="replay one finite trace of --programs programs at every rate (the "
                           "old method: past some rate it is an offline burst)")
    parser.add_argument("--seeds", type=_seed_list, default=list(ss.DEFAULT_SEEDS),
                        help="steady state: one trace and search per seed; capacities are "
                             "reported per seed and as min / median / max (default "
                             f"{','.join(map(str, ss.DEFAULT_SEEDS))}; --seed is then only the "
                             "unloaded target run's)")
    warmup = parser.add_mutually_exclusive_group()
    warmup.add_argument("--warmup-programs", type=_nonnegative_int,
                        default=ss.DEFAULT_WARMUP_PROGRAMS,
                        help="steady state: programs arriving before the window (not measured)")
    warmup.add_argument("--warmup-seconds", type=_nonnegative_float, default=None,
                        help="steady state: the warm-up in seconds of arrivals instead "
                             "(round(S x rate) programs at each rate): compares setups of "
                             "different capacities at equal warm-up time")
    parser.add_argument("--window-programs", type=_positive_int,
                        default=ss.DEFAULT_WINDOW_PROGRAMS,
                        help="steady state: the window's length in programs at the rate tested "
                             "(the programs arriving in it are measured)")
    tail = parser.add_mutually_exclusive_group()
    tail.add_argument("--tail-programs", type=_positive_int, default=ss.DEFAULT_TAIL_PROGRAMS,
                      help="steady state: programs arriving after the window (generated, "
                           "simulated only as long as needed); a measured program unfinished "
                           "when the last one arrives means overloaded")
    tail.add_argument("--tail-seconds", type=_nonnegative_float, default=None,
                      help="steady state: the tail in seconds of arrivals instead "
                           "(round(S x rate) programs at each rate)")
    parser.add_argument("--max-backlog-growth", type=positive_float,
                        default=ss.DEFAULT_MAX_BACKLOG_GROWTH,
                        help="steady state: overloaded when the programs in the system grow over "
                             "the window by more than this fraction of the window's programs")
    parser.add_argument("--set", type=parse_override, action="append", default=[],
                        metavar="FIELD=VALUE",
                        help="steady state: an engine config field for every policy "
                             "(repeatable), e.g. --set ttft_slo_seconds=0.25; the relative "
                             "target stays unloaded vllm's without it")
    parser.set_defaults(finite_trace=False)


def _knob_list(text: str) -> list[str]:
    from bench.analysis.sensitivity import KNOBS

    return name_list(text, KNOBS, "knobs")


def _sensitivity(args: argparse.Namespace) -> None:
    import shlex
    import sys

    from bench.analysis.sensitivity import KNOBS, knob_tables, run_knobs, write_outputs

    knobs = {k: KNOBS[k] for k in (args.knobs or KNOBS)}
    points = run_knobs(args.workload, args.rate, args.programs, args.seed, args.policy, knobs,
                       progress=not args.no_progress)
    argv = sys.argv[1:] if args.argv is None else args.argv
    command = "agentix bench " + " ".join(shlex.quote(a) for a in argv)
    header = (f"```\n{command}\n```\n\n{args.policy}, {args.programs} programs at "
              f"{args.rate:g}/s (seed {args.seed}), simulated A100-80GB + Llama-3.1-8B; "
              f"latencies in s/token.")
    print(knob_tables(points))
    md, png = write_outputs(points, args.workload, args.out, header)
    print(f"wrote {md} and {png}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentix bench", description=__doc__)
    sub = parser.add_subparsers(dest="bench_command", required=True)
    sim = sub.add_parser("sim", help="simulate a workload under a policy (virtual time)")
    sim.add_argument("--workload", choices=WORKLOADS, required=True)
    sim.add_argument("--policy", choices=sorted([*BASELINES, DEFAULTS]), default=DEFAULTS,
                     help="a baseline (bench/sim/baselines.py), or 'defaults': the engine's "
                          "own defaults, as `agentix serve` runs (default)")
    sim.add_argument("--rate", type=positive_float, default=1.0,
                     help="program arrivals per second (the mean of --arrivals; 'inf': all "
                          "at once)")
    sim.add_argument("--programs", type=_positive_int, default=100)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--preset", choices=sorted(GPU_PRESETS), default="a100-80g")
    sim.add_argument("--model", choices=sorted(MODEL_PRESETS), default="llama-3.1-8b")
    sim.add_argument("--set", type=parse_override, action="append", default=[],
                     metavar="FIELD=VALUE",
                     help="override an engine config field (repeatable), e.g. "
                          "--set max_preemptions_per_round=0")
    sim.add_argument("--json", action="store_true", help="print one JSON object (with "
                     "--replicas/--placement also cache_hit_rate and per_replica figures)")
    sim.add_argument("--program-ids", choices=PROGRAM_IDS, default="explicit",
                     help="how calls get programs: the trace's (explicit), the trace's "
                          "but never ended (named: ended by TTL), inferred from their "
                          "prompts as the HTTP door's --infer-programs does (inferred), or "
                          "none: one-call programs (bench/sim/client_programs.py)")
    sim.add_argument("--hot-tenant", type=_fraction, default=None, metavar="FRACTION",
                     help="make about this fraction of the programs one tenant's, every call "
                          f"starting with the same {HOT_PREFIX_TOKENS:,}-token system prompt "
                          "(see bench/sim/hot_tenant.py)")
    _add_arrivals_argument(sim)
    _add_memory_pressure_argument(sim)
    _add_replica_arguments(sim)
    _add_replica_state_arguments(sim)
    sim.set_defaults(run=_sim)

    sw = sub.add_parser("sweep", help="policies x arrival rates: latency tables, capacities, plot")
    _add_policy_run_arguments(sw, programs=100, out_files="sweep_<workload>.md/.png")
    sw.add_argument("--rates", type=_rate_list, default=[0.05, 0.1, 0.2, 0.4],
                    help="comma-separated program arrival rates per second")
    add_jobs_argument(sw, "points")
    sw.set_defaults(run=_sweep)

    from bench.analysis.capacity import MAX_EXPANSIONS

    cap = sub.add_parser("capacity", help="each policy's capacity at two latency targets by "
                         "bracketing and bisection, at steady state")
    _add_policy_run_arguments(cap, programs=300, out_files="capacity_<workload>.*")
    cap.add_argument("--start-rate", type=positive_float, default=1.0,
                     help="first rate tried for every policy (programs/s)")
    cap.add_argument("--iterations", type=int, default=3,
                     help="bisection steps per policy and target")
    cap.add_argument("--max-expansions", type=_nonnegative_int, default=MAX_EXPANSIONS,
                     help="rates tried past --start-rate (doubling or halving) to find a "
                          f"bracket (default {MAX_EXPANSIONS}; 0: run --start-rate alone)")
    cap.add_argument("--fixed-target", type=_nonnegative_float, default=FIXED_TARGET,
                     help=f"a second, absolute latency target in s/token (default "
                          f"{FIXED_TARGET:g}; 0: none)")
    add_jobs_argument(cap, "searches (one per policy, and seed)")
    _add_memory_pressure_argument(cap)
    _add_replica_state_arguments(cap)
    _add_steady_arguments(cap)
    cap.set_defaults(run=_capacity)

    se = sub.add_parser("sensitivity", help="one scheduler knob at a time (K, quantum, beta, "
                        "multistep, program service half-life) on one trace")
    se.add_argument("--workload", choices=WORKLOADS, required=True)
    se.add_argument("--rate", type=positive_float, required=True)
    se.add_argument("--programs", type=_positive_int, default=300)
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--policy", choices=sorted(BASELINES), default="atlas")
    se.add_argument("--knobs", type=_knob_list, default=None,
                    help="comma-separated knobs (default: all)")
    se.add_argument("--out", default="bench/results")
    se.add_argument("--no-progress", action="store_true", help="no progress bar")
    se.set_defaults(run=_sensitivity)

    ca = sub.add_parser("calibrate", help="fit the cost model to the real engine on this CPU "
                        "and check the simulator against it on a scaled-down mixed trace")
    add_real_run_arguments(ca, programs=12, rate=0.25, policies=["atlas", "optimized"])
    ca.add_argument("--calibration", default=None,
                    help="reuse the fit of this JSON file instead of probing")
    ca.add_argument("--out", default="bench/results/calibration_cpu.json")
    ca.set_defaults(run=_calibrate)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.run(args)


if __name__ == "__main__":
    main()
