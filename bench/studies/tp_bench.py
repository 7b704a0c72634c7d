"""Tensor parallelism on this CPU: TP=1 against TP=2 tokens/s, and the cost model's TP term
against measured TP=2 step times.

    python -m bench.studies.tp_bench [--json PATH] [--rounds 3]

The model is a random Llama written to a temp folder (SmolLM2's 9 heads do not split in two):
hidden 512, 8 heads, 4 KV heads, intermediate 2,048, 8 layers, vocab 4,096, float32. Every
measurement runs in a fresh process on the same total of torch threads: TP=1 with all of
them, TP=2 with half each (the engine divides them).

1. Throughput: `--num` prompts of `--prompt-tokens` tokens, `--max-tokens` out each, one
   engine per run; TP=1 and TP=2 alternate for `--rounds` rounds; medians.
2. The cost model's TP term: the calibration probes (`bench.support.calibrate`) fitted on TP=1 with
   one thread (a "device" is one core), then the same probes measured at TP=2 (one thread per
   rank) against the fitted model with `tensor_parallel=2`, which divides the FLOPs and bytes
   of a step by 2 and keeps the per-step overhead: without the collectives' term, and with
   it set from gloo's all-reduce latency and bus bandwidth measured here (`run_allreduce`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, replace
from typing import Any, Sequence

from bench.support.measure import run_in_subprocess

MODEL = dict(vocab_size=4096, hidden_size=512, intermediate_size=2048, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
             rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
PROBES = dict(prefill_sizes=(16, 64, 256), batches=(1, 4, 16), contexts=(32, 256), repeats=3)


def write_model(path: str) -> str:
    """The random benchmark Llama, saved to `path` (seed 0)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**MODEL)).eval().save_pretrained(path)
    return path


def run_generate(model_dir: str, tp: int, threads: int, num: int, prompt_tokens: int,
                 max_tokens: int) -> dict[str, Any]:
    """(In a fresh process.) Generate and time; tokens/s over the generate call only."""
    import torch

    from bench.sim.baselines import PLAIN
    from engine import LLM, SamplingParams

    torch.set_num_threads(threads)
    llm = LLM(model_dir, **PLAIN, tensor_parallel_size=tp, num_kv_blocks=num * (
        (prompt_tokens + max_tokens) // 16 + 2), max_num_seqs=num)
    prompts = [[3 + (i * 7 + j) % 4000 for j in range(prompt_tokens)] for i in range(num)]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(max_tokens=2, ignore_eos=True))   # warm-up
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - started
    llm.close()
    tokens = sum(len(o.token_ids) for o in outputs)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def run_probes(model_dir: str, tp: int, threads: int) -> dict[str, Any]:
    """(In a fresh process.) The calibration probes at `tp`; the fit too when tp is 1."""
    import torch

    from bench.sim.baselines import PLAIN
    from bench.support.calibrate import Probes, measure_steps, probe_config
    from bench.support.real_run import real_engine
    from bench.support.step_fit import fit_step_times, model_preset_for

    torch.set_num_threads(threads)
    probes = Probes(**PROBES)
    config = probe_config({**PLAIN, "dtype": "float32", "num_kv_blocks": 512,
                           "tensor_parallel_size": tp}, probes)
    engine, recorder = real_engine(model_dir, config)
    samples = measure_steps(engine, recorder, probes)
    engine.close()
    out: dict[str, Any] = {"samples": [[list(map(list, s.chunks)), s.new_round, s.seconds]
                                       for s in samples]}
    if tp == 1:
        out["fit"] = asdict(fit_step_times(samples, model_preset_for(model_dir)))
    return out


ALLREDUCE_TOKENS = (1, 1024)  # activations of 1 and 1,024 tokens: latency, then bandwidth
ALLREDUCE_REPEATS = 200


def _allreduce_rank(rank: int, port: int, hidden: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    medians = []
    for tokens in ALLREDUCE_TOKENS:
        tensor = torch.ones(tokens, hidden)
        for _ in range(10):
            dist.all_reduce(tensor)
        times = []
        for _ in range(ALLREDUCE_REPEATS):
            started = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - started)
        medians.append(statistics.median(times))
    if rank == 0:
        out.put(medians)
    dist.destroy_process_group()


def run_allreduce(hidden: int) -> dict[str, Any]:
    """(In a fresh process.) gloo all-reduce between 2 local ranks of float32 activations of
    `ALLREDUCE_TOKENS` tokens: the latency (the smallest's median) and the bus bandwidth
    (a ring moves 2 (tp - 1) / tp of the bytes) that `CostModel` takes."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.Queue()
    mp.start_processes(_allreduce_rank, args=(port, hidden, out), nprocs=2,
                       start_method="spawn")
    small, large = out.get(timeout=60)
    ring_bytes = 2 * (2 - 1) / 2 * ALLREDUCE_TOKENS[1] * hidden * 4  # what a rank sends
    return {"latency": small, "bus_bandwidth": ring_bytes / max(large - small, 1e-9),
            "medians": [small, large]}


def cost_model_check(model_dir: str, fit: dict[str, float], samples: list,
                     allreduce: dict[str, float] | None = None) -> dict[str, Any]:
    """Measured TP=2 step times against the TP=1 fit with `tensor_parallel=2`, and the
    collectives' term from `allreduce` (measured latency and bus bandwidth; None: without
    that term)."""
    from bench.sim.cost_model import CostModel
    from bench.support.step_fit import cpu_preset, model_preset_for

    model = replace(model_preset_for(model_dir), tensor_parallel=2)
    gpu = cpu_preset(fit["flops_rate"], fit["byte_rate"])
    if allreduce is not None:
        gpu = replace(gpu, allreduce_latency=allreduce["latency"],
                      allreduce_bus_bandwidth=allreduce["bus_bandwidth"])
    cost = CostModel(gpu, model, fit["step_overhead"], fit["schedule_overhead"])
    errors, rows = [], []
    for chunks, new_round, seconds in samples:
        predicted = cost.step_seconds([tuple(c) for c in chunks], new_round)
        errors.append(predicted / seconds - 1)
        rows.append({"chunks": len(chunks), "tokens": sum(c[0] for c in chunks),
                     "measured": seconds, "predicted": predicted})
    return {"rms_rel_error": statistics.fmean(e * e for e in errors) ** 0.5,
            "mean_rel_error": statistics.fmean(errors),
            "max_abs_rel_error": max(abs(e) for e in errors), "steps": rows}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="torch threads in all")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentix-tp-bench-") as model_dir:
        write_model(model_dir)
        runs: dict[int, list[dict]] = {1: [], 2: []}
        for _ in range(args.rounds):
            for tp in (1, 2):
                runs[tp].append(run_in_subprocess("bench.studies.tp_bench:run_generate", dict(
                    model_dir=model_dir, tp=tp, threads=args.threads, num=args.num,
                    prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens)))
        speed = {tp: statistics.median(r["tokens_per_s"] for r in rs) for tp, rs in runs.items()}
        one = run_in_subprocess("bench.studies.tp_bench:run_probes",
                                dict(model_dir=model_dir, tp=1, threads=1))
        two = run_in_subprocess("bench.studies.tp_bench:run_probes",
                                dict(model_dir=model_dir, tp=2, threads=2))
        allreduce = run_in_subprocess("bench.studies.tp_bench:run_allreduce",
                                      dict(hidden=MODEL["hidden_size"]))
        before = cost_model_check(model_dir, one["fit"], two["samples"])
        check = cost_model_check(model_dir, one["fit"], two["samples"], allreduce)
    measured = {tp: statistics.fmean(s[2] for s in r["samples"])
                for tp, r in ((1, one), (2, two))}
    out = {"tokens_per_s": speed, "tp2_over_tp1": speed[2] / speed[1], "runs": runs,
           "fit_tp1_one_thread": one["fit"], "mean_step_seconds": measured,
           "gloo_allreduce": allreduce, "cost_model_tp2_without_collectives": before,
           "cost_model_tp2": check}
    print(f"| TP | tokens/s (median of {args.rounds}) | vs TP=1 |\n| --- | --- | --- |")
    for tp in (1, 2):
        print(f"| {tp} | {speed[tp]:.1f} | {speed[tp] / speed[1]:.2f}x |")
    print(f"\ngloo all-reduce: {allreduce['latency'] * 1e6:.0f} us, "
          f"{allreduce['bus_bandwidth'] / 1e9:.2f} GB/s bus bandwidth")
    for name, result in (("without the collectives' term", before),
                         ("with the measured collectives", check)):
        print(f"cost model TP=2 step error {name}: mean {result['mean_rel_error']:+.1%}, rms "
              f"{result['rms_rel_error']:.1%}, max {result['max_abs_rel_error']:.1%} over "
              f"{len(result['steps'])} steps")
    print(f"measured mean step TP=2 / TP=1 (one thread per rank): "
          f"{measured[2] / measured[1]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
