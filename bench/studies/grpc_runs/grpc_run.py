"""The real engine behind its gRPC server, driven by a client in real time: a scaled-down mixed
trace on a CPU with a small model, once per policy on a fresh server, and the program-level
metrics and prefill tokens computed of each (`python -m bench.studies.grpc_runs.grpc_run`).

The server runs in this process (`server.app.start_server`, the engine on its own thread) with
few running calls (`max_num_seqs`) so that calls queue. The client (`AsyncAgentixClient`) plays
the trace as the simulator's driver does: a program opens at its arrival; a call is sent once
all its parents have finished and then its `delay` has passed (a root call: its delay after the
arrival), with the simulator's made-up prompt ids (`bench.sim.simulate.PromptMaker`, a shared
prefix included), `max_tokens = output_len` and `ignore_eos`; the program ends after its last
call. A program's finish is when its last completion arrived; its tokens are all it received;
its prefill tokens computed are its calls' prompt tokens less those the server served from
cache (each completion's usage). Real sleeps, so a run lasts the trace's whole span.

Every call after a program's first waits for a tool (`with_tool_delays`): one without a delay
of its own (ShareGPT, LATS) gets one drawn from the BFCL generator's `TOOL_DELAY_S`, in
seconds like the trace's own BFCL delays (the run keeps the trace's time axis), so programs
sit idle between calls and the KV memory decides whether their history is still cached.

The default policies are `optimized` (FCFS with the same chunked prefill, prefix caching and
multistep as the others), `atlas-lru` (ATLAS on the LRU cache) and `atlas` (ATLAS with
program-aware memory): the first pair differs in the scheduling only, the second in the KV
memory only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from bench.sim.baselines import engine_config_for
from bench.sim.metrics import Metrics, compute_metrics, percentile
from bench.sim.simulate import ProgramResult, PromptMaker
from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.bfcl import TOOL_DELAY_S
from server.client import Completion

DEFAULT_POLICIES = ("optimized", "atlas-lru", "atlas")


def with_tool_delays(trace: Trace, seed: int,
                     delay_range: tuple[float, float] = TOOL_DELAY_S) -> Trace:
    """`trace` with a delay drawn uniformly from `delay_range` (seconds;
    `random.Random(seed)`, calls in trace order) for every call that has parents and no delay
    of its own; every other call is kept as it is."""
    rng = random.Random(seed)

    def call_with_delay(call: TraceCall) -> TraceCall:
        if not call.parents or call.delay > 0:
            return call
        return replace(call, delay=rng.uniform(*delay_range))

    return Trace(tuple(replace(p, calls=tuple(call_with_delay(c) for c in p.calls))
                       for p in trace.programs))


def server_config(model_dir: str | Path, policy: str, **fields: Any):
    """The EngineConfig of a baseline `policy` over `model_dir` (float32 unless `fields` say
    otherwise)."""
    from engine.config import EngineConfig

    return EngineConfig.from_flat(model=str(model_dir),
                                  **engine_config_for(policy, {"dtype": "float32", **fields}))


async def drive(address: str, trace: Trace, vocab: int
                ) -> tuple[list[ProgramResult], int, list[float]]:
    """Play `trace` against the server at `address` in real time, streaming every call.
    Returns one result per program, with times in seconds since the start of the run, the
    prefill tokens the server computed (prompt tokens less cached tokens, summed over every
    call), and each call's time to first token (from sending it to its first delta)."""
    from server.client import AsyncAgentixClient

    prompts = PromptMaker(vocab)
    async with AsyncAgentixClient(address) as client:
        start = asyncio.get_running_loop().time()
        runs = await asyncio.gather(*(_run_program(client, prompts, index, program, start)
                                      for index, program in enumerate(trace.programs)))
    return ([result for result, _, _ in runs], sum(prefill for _, prefill, _ in runs),
            [ttft for _, _, ttfts in runs for ttft in ttfts])


async def _sleep_until(start: float, t: float) -> None:
    delay = start + t - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _run_program(client: Any, prompts: PromptMaker, index: int, program: TraceProgram,
                       start: float) -> tuple[ProgramResult, int, list[float]]:
    """The program's result, its calls' prefill tokens computed and their times to first
    token."""
    loop = asyncio.get_running_loop()
    await _sleep_until(start, program.arrival)
    calls: dict[str, asyncio.Task[tuple[float, int, int, float]]] = {}

    async def run_call(prog: Any, call: TraceCall) -> tuple[float, int, int, float]:
        ready = max([(await calls[p])[0] for p in call.parents], default=program.arrival)
        await _sleep_until(start, ready + call.delay)
        sent, first = loop.time(), None
        async for item in prog.stream(prompts.prompt(index, call, program),
                                      call_id=f"{program.program_id}/{call.call_id}",
                                      max_tokens=call.output_len, ignore_eos=True):
            if isinstance(item, Completion):
                completion = item
            elif first is None and item.token_ids:
                first = loop.time()
        usage = completion.usage
        return (loop.time() - start, len(completion.token_ids),
                usage.prompt_tokens - usage.cached_tokens, (first or loop.time()) - sent)

    async with client.program(program_id=program.program_id) as prog:
        for call in program.calls:  # topological order: parents' tasks exist already
            calls[call.call_id] = asyncio.create_task(run_call(prog, call))
        done = await asyncio.gather(*calls.values())
    result = ProgramResult(program.program_id, program.workload, program.arrival,
                           max(t for t, _, _, _ in done), sum(n for _, n, _, _ in done),
                           len(program.calls))
    return result, sum(prefill for _, _, prefill, _ in done), [ttft for *_, ttft in done]


def run_policy(trace: Trace, policy: str, model_dir: str | Path,
               engine_fields: dict[str, Any]) -> tuple[list[ProgramResult], dict[str, Any]]:
    """Start a fresh server for `policy`, play `trace` against it, check that the engine is
    idle and clean (no call left, every KV block free, integrity), stop the server. Returns
    the programs' results and the run's figures (the scheduler's `stats()`, prefill tokens
    computed, wall seconds)."""
    from server.app import start_server

    started = time.perf_counter()
    running = start_server(server_config(model_dir, policy, **engine_fields), port=0)
    try:
        free_at_start, vocab = running.engine_loop.call(
            lambda e: (e.kv.num_free_blocks, e.vocab_size))
        results, prefill, ttfts = asyncio.run(drive(running.address, trace, vocab))
        state = _wait_idle(running, free_at_start)
    finally:
        running.stop()
    return results, {**state, "prefill_tokens_computed": prefill,
                     "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
                     "wall_seconds": time.perf_counter() - started}


def _wait_idle(running: Any, free_at_start: int, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until the engine has no call and all blocks are free; raise if it does not get
    there or its integrity check fails. Returns the scheduler's `stats()`."""
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
        return dict(engine.scheduler.stats())

    return running.engine_loop.call(figures)


def check_tokens(trace: Trace, results: Sequence[ProgramResult]) -> None:
    """Raise if a program is missing or did not get exactly its calls' output tokens."""
    got = {r.program_id: r.generated_tokens for r in results}
    for p in trace.programs:
        want = sum(c.output_len for c in p.calls)
        if got.get(p.program_id) != want:
            raise RuntimeError(f"program {p.program_id}: {got.get(p.program_id)} tokens, "
                               f"expected {want}")


def format_metrics(policy: str, m: Metrics, prefill_tokens: int) -> str:
    """One report line: normalized latency (mean, P50, P95), throughput, makespan and the
    prefill tokens computed."""
    return (f"{policy:<10} mean {m.mean_norm_latency:.4f}  P50 {m.p50_norm_latency:.4f}  "
            f"P95 {m.p95_norm_latency:.4f}  s/token;  throughput "
            f"{m.throughput_tokens_per_s:.1f} tokens/s, makespan {m.makespan_s:.1f} s;  "
            f"prefill computed {prefill_tokens} tokens")


def build_parser() -> argparse.ArgumentParser:
    from bench.cli import add_real_run_arguments

    parser = argparse.ArgumentParser(prog="python -m bench.studies.grpc_runs.grpc_run",
                                     description=__doc__,
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
    trace = with_tool_delays(trace, args.seed)
    low, high = TOOL_DELAY_S
    print(f"tool delays: every later call without one waits U({low:g}, {high:g}) s", flush=True)
    figures: dict[str, Any] = {}
    for policy in args.policies:
        results, server = run_policy(trace, policy, args.model_dir, fields)
        check_tokens(trace, results)
        metrics = compute_metrics(results)
        figures[policy] = {**metrics.to_dict(), **server}
        print(format_metrics(policy, metrics, server["prefill_tokens_computed"])
              + f"; TTFT P50 {server['ttft_p50_s']:.2f} s, P99 {server['ttft_p99_s']:.2f} s"
              + f"  ({server['wall_seconds']:.0f} s, {server['num_preemptions']} preemptions)",
              flush=True)
    reference = args.policies[0]
    for policy in args.policies[1:]:
        a, b = figures[reference], figures[policy]
        print(f"ratio {reference}/{policy}: mean "
              f"{a['mean_norm_latency'] / b['mean_norm_latency']:.2f}  "
              f"P95 {a['p95_norm_latency'] / b['p95_norm_latency']:.2f}")
    if args.json:
        argv_used = sys.argv[1:] if argv is None else argv
        command = ("python -m bench.studies.grpc_runs.grpc_run "
                   + " ".join(shlex.quote(a) for a in argv_used))
        Path(args.json).write_text(json.dumps({"command": command, "figures": figures},
                                              indent=1) + "\n")


if __name__ == "__main__":
    main()
