"""The real engine behind its gRPC server, driven by a client in real time: a scaled-down mixed
trace on a CPU with a small model, once per policy on a fresh server, and the program-level
metrics of each (`python -m bench.grpc_run`).

The server runs in this process (`server.app.start_server`, the engine on its own thread) with
few running calls (`max_num_seqs`) so that calls queue. The client (`AsyncAgentixClient`) plays
the trace as the simulator's driver does: a program opens at its arrival; a call is sent once
all its parents have finished and then its `delay` has passed (a root call: its delay after the
arrival), with the simulator's made-up prompt ids (`bench.simulate.PromptMaker`, a shared
prefix included), `max_tokens = output_len` and `ignore_eos`; the program ends after its last
call. A program's finish is when its last completion arrived; its tokens are all it received.
Real sleeps, so a run lasts the trace's whole span.

"fcfs" here is the `optimized` baseline (FCFS with the same chunked prefill, prefix caching and
multistep as `atlas`), so the two runs differ only in the scheduling policy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any, Sequence

from bench.metrics import Metrics, compute_metrics
from bench.simulate import ProgramResult, PromptMaker, engine_config_for
from bench.trace import Trace, TraceCall, TraceProgram

DEFAULT_POLICIES = ("optimized", "atlas")


def server_config(model_dir: str | Path, policy: str, **fields: Any):
    """The EngineConfig of a baseline `policy` over `model_dir` (float32 unless `fields` say
    otherwise)."""
    from engine.config import EngineConfig

    return EngineConfig(model=str(model_dir),
                        **engine_config_for(policy, {"dtype": "float32", **fields}))


async def drive(address: str, trace: Trace, vocab: int) -> list[ProgramResult]:
    """Play `trace` against the server at `address` in real time; one result per program,
    with times in seconds since the start of the run."""
    from server.client import AsyncAgentixClient

    prompts = PromptMaker(vocab)
    async with AsyncAgentixClient(address) as client:
        start = asyncio.get_running_loop().time()
        return list(await asyncio.gather(*(
            _run_program(client, prompts, index, program, start)
            for index, program in enumerate(trace.programs))))


async def _sleep_until(start: float, t: float) -> None:
    delay = start + t - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _run_program(client: Any, prompts: PromptMaker, index: int, program: TraceProgram,
                       start: float) -> ProgramResult:
    loop = asyncio.get_running_loop()
    await _sleep_until(start, program.arrival)
    calls: dict[str, asyncio.Task[tuple[float, int]]] = {}

    async def run_call(prog: Any, call: TraceCall) -> tuple[float, int]:
        ready = max([(await calls[p])[0] for p in call.parents], default=program.arrival)
        await _sleep_until(start, ready + call.delay)
        completion = await prog.generate(prompts.prompt(index, call, program),
                                         call_id=f"{program.program_id}/{call.call_id}",
                                         max_tokens=call.output_len, ignore_eos=True)
        return loop.time() - start, len(completion.token_ids)

    async with client.program(program_id=program.program_id) as prog:
        for call in program.calls:  # topological order: parents' tasks exist already
            calls[call.call_id] = asyncio.create_task(run_call(prog, call))
        done = await asyncio.gather(*calls.values())
    return ProgramResult(program.program_id, program.workload, program.arrival,
                         max(t for t, _ in done), sum(n for _, n in done), len(program.calls))


def run_policy(trace: Trace, policy: str, model_dir: str | Path,
               engine_fields: dict[str, Any]) -> tuple[list[ProgramResult], dict[str, Any]]:
    """Start a fresh server for `policy`, play `trace` against it, check that the engine is
    idle and clean (no call left, every KV block free, integrity), stop the server. Returns
    the programs' results and the server's figures (steps, preemptions, wall seconds)."""
    from server.app import start_server

    started = time.perf_counter()
    running = start_server(server_config(model_dir, policy, **engine_fields), port=0)
    try:
        free_at_start, vocab = running.engine_loop.call(
            lambda e: (e.kv.num_free_blocks, e.vocab_size))
        results = asyncio.run(drive(running.address, trace, vocab))
        state = _wait_idle(running, free_at_start)
    finally:
        running.stop()
    return results, {**state, "wall_seconds": time.perf_counter() - started}


def _wait_idle(running: Any, free_at_start: int, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until the engine has no call and all blocks are free; raise if it does not get
    there or its integrity check fails. Returns its step and preemption counts."""
    def state(engine) -> tuple[bool, int, int]:
        return engine.has_unfinished_calls(), len(engine.calls), engine.kv.num_free_blocks

    deadline = time.monotonic() + timeout
    while (now := running.engine_loop.call(state)) != (False, 0, free_at_start):
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not idle after the run: (unfinished, calls kept, free "
                               f"blocks) = {now}, expected (False, 0, {free_at_start})")
        time.sleep(0.05)

    def figures(engine) -> dict[str, Any]:
        engine.check_integrity()
        s = engine.scheduler
        return {"num_rounds": s.num_rounds, "num_preemptions": s.num_preemptions,
                "num_swap_outs": s.num_swap_outs}

    return running.engine_loop.call(figures)


def check_tokens(trace: Trace, results: Sequence[ProgramResult]) -> None:
    """Raise if a program is missing or did not get exactly its calls' output tokens."""
    got = {r.program_id: r.generated_tokens for r in results}
    for p in trace.programs:
        want = sum(c.output_len for c in p.calls)
        if got.get(p.program_id) != want:
            raise RuntimeError(f"program {p.program_id}: {got.get(p.program_id)} tokens, "
                               f"expected {want}")


def format_metrics(policy: str, m: Metrics) -> str:
    return (f"{policy:<10} mean {m.mean_norm_latency:.4f}  P50 {m.p50_norm_latency:.4f}  "
            f"P95 {m.p95_norm_latency:.4f}  s/token;  throughput "
            f"{m.throughput_tokens_per_s:.1f} tokens/s, makespan {m.makespan_s:.1f} s")


def build_parser() -> argparse.ArgumentParser:
    from bench.cli import add_real_run_arguments

    parser = argparse.ArgumentParser(prog="python -m bench.grpc_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_real_run_arguments(parser, programs=36, rate=0.75, policies=list(DEFAULT_POLICIES))
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> None:
    import shlex
    import sys

    from bench.cli import real_run_setup

    args = build_parser().parse_args(argv)
    print("the gRPC server runs in this process; the first policy is the reference")
    trace, fields = real_run_setup(args)
    figures: dict[str, Any] = {}
    for policy in args.policies:
        results, server = run_policy(trace, policy, args.model_dir, fields)
        check_tokens(trace, results)
        metrics = compute_metrics(results)
        figures[policy] = {**metrics.to_dict(), **server}
        print(format_metrics(policy, metrics) + f"  ({server['wall_seconds']:.0f} s, "
              f"{server['num_preemptions']} preemptions)", flush=True)
    reference = args.policies[0]
    for policy in args.policies[1:]:
        a, b = figures[reference], figures[policy]
        print(f"ratio {reference}/{policy}: mean "
              f"{a['mean_norm_latency'] / b['mean_norm_latency']:.2f}  "
              f"P95 {a['p95_norm_latency'] / b['p95_norm_latency']:.2f}")
    if args.json:
        argv_used = sys.argv[1:] if argv is None else argv
        command = "python -m bench.grpc_run " + " ".join(shlex.quote(a) for a in argv_used)
        Path(args.json).write_text(json.dumps({"command": command, "figures": figures},
                                              indent=1) + "\n")


if __name__ == "__main__":
    main()
