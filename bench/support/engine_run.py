"""The Agentix half of the throughput benchmark: all requests submitted at once."""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch

from bench.sim.sharegpt import Request
from bench.support.measure import peak_rss_mb


def run_agentix(model_dir: str, requests: Sequence[Request], config: dict[str, Any],
                threads: int = 2, per_request: bool = False) -> dict[str, Any]:
    """Greedy generation of every request with exactly its own output length (EOS ignored),
    through the offline `LLM` with `config` over `PLAIN` (the engine measured: FCFS, no prefix
    cache). Returns `tokens`, `seconds` (generate only; loading and a 2-token warm-up
    excluded), `tokens_per_s`, `preemptions` and `peak_rss_mb` of this process; with
    `per_request`, also `first_token_s` (each request's time from its arrival in the engine
    to its first sampled token) and `token_ids` (each request's). Uses `threads` torch
    threads."""
    from bench.sim.baselines import PLAIN
    from engine import LLM, SamplingParams

    torch.set_num_threads(threads)
    llm = LLM(model_dir, **{**PLAIN, **config})
    llm.generate([list(requests[0][0])], SamplingParams(max_tokens=2, ignore_eos=True))
    prompts = [list(p) for p, _ in requests]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for _, n in requests]
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.token_ids) for o in outputs)
    if tokens != sum(n for _, n in requests):
        raise RuntimeError(f"engine generated {tokens} tokens, expected {sum(n for _, n in requests)}")
    llm.engine.check_integrity()
    result = {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "preemptions": llm.engine.scheduler.num_preemptions,
        "peak_rss_mb": peak_rss_mb(),
    }
    if per_request:
        result["first_token_s"] = [o.first_token_time - o.arrival_time for o in outputs]
        result["token_ids"] = [list(o.token_ids) for o in outputs]
    return result
