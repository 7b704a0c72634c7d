"""Step `tensor-parallel`: `LLM(model, tensor_parallel_size=2, device="cuda")` against
`tensor_parallel_size=1` on the tests' tiny Llama (4 query / 2 KV heads): the same greedy
tokens (fp32), and tokens/s of each (a tiny model: engine overhead, not TP speed-up).
`n/a` with fewer than two GPUs."""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import fields
from pathlib import Path

from bench.studies.gpu_check.step import Outcome, Step, release_device_memory, require


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)


def resolve(args: argparse.Namespace) -> str:
    require("engine:LLM", "engine:SamplingParams", "engine.config:EngineConfig",
            "agentix_testing.tiny_llama:build_tiny_llama", "torch.distributed")
    from engine.config import EngineConfig

    if "tensor_parallel_size" not in {f.name for f in fields(EngineConfig)}:
        return ("imports resolve; EngineConfig has no tensor_parallel_size yet: this step FAILs "
                "on a machine with 2+ GPUs until it lands")
    return "engine, agentix_testing/tiny_llama.py import; EngineConfig has tensor_parallel_size"


def generate(model_dir: str, tp: int, prompts: list[list[int]], max_tokens: int) -> dict:
    from bench.sim.baselines import PLAIN
    from engine import LLM, SamplingParams

    llm = LLM(model_dir, **PLAIN, device="cuda", tensor_parallel_size=tp)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts[:1], SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up
    start = time.perf_counter()
    tokens = [o.token_ids for o in llm.generate(prompts, params)]
    seconds = time.perf_counter() - start
    llm.engine.check_integrity()
    del llm
    release_device_memory()
    return {"tokens": tokens, "seconds": seconds,
            "tokens_per_s": sum(map(len, tokens)) / seconds}


def run(args: argparse.Namespace) -> Outcome:
    import torch

    from agentix_testing.tiny_llama import TINY_LLAMA, build_tiny_llama

    count = torch.cuda.device_count()
    if count < 2:
        return Outcome("n/a", f"n/a ({count} GPU{'' if count == 1 else 's'})", {"gpus": count})
    rng = random.Random(0)
    prompts = [[rng.randrange(3, TINY_LLAMA["vocab_size"]) for _ in range(rng.randint(8, 64))]
               for _ in range(args.num)]
    with tempfile.TemporaryDirectory(prefix="gpu-check-tp-") as tmp:
        build_tiny_llama(Path(tmp), tie_word_embeddings=True)
        runs = {tp: generate(tmp, tp, prompts, args.max_tokens) for tp in (1, 2)}
    same = sum(a == b for a, b in zip(runs[1]["tokens"], runs[2]["tokens"]))
    summary = (f"TP=2 tokens equal TP=1 for {same}/{len(prompts)} prompts; tokens/s TP=1 "
               f"{runs[1]['tokens_per_s']:.0f}, TP=2 {runs[2]['tokens_per_s']:.0f} "
               f"(tiny model, {count} GPUs)")
    return Outcome("ok" if same == len(prompts) else "FAIL", summary,
                   {"gpus": count, "runs": {tp: {k: v for k, v in r.items() if k != "tokens"}
                                            for tp, r in runs.items()}, "equal_prompts": same})


STEP = Step(__doc__, add_arguments, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
