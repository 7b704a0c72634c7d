"""The vLLM half of the vLLM comparison: all requests submitted at once to vLLM's offline `LLM`.

Runs in the vLLM venv's interpreter (`bench.support.measure.run_in_subprocess(...,
python=...)`), so it imports nothing of Agentix and vllm only inside the call.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

GIB = 1 << 30


def run_vllm(model_dir: str, requests: Sequence[tuple[list[int], int]], max_num_seqs: int,
             kv_cache_gb: float, enforce_eager: bool, dtype: str = "float32") -> dict[str, Any]:
    """Greedy generation of every request (its prompt token ids, exactly its own output
    length, EOS ignored) with vLLM's `LLM`, prefix caching off, `kv_cache_gb` of KV cache
    (`kv_cache_memory_bytes`: the setting `VLLM_CPU_KVCACHE_SPACE` sets in whole GiB on CPU).

    Returns `tokens`, `seconds` (generate only; loading and a 2-token warm-up excluded),
    `tokens_per_s`, `first_token_s` (per request: vLLM's `first_token_latency`, from its
    arrival in the engine to the frontend's receipt of its first token), `token_ids` (per
    request) and `preemptions`."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_dir, dtype=dtype, max_num_seqs=max_num_seqs,
              enable_prefix_caching=False, kv_cache_memory_bytes=int(kv_cache_gb * GIB),
              enforce_eager=enforce_eager, disable_log_stats=False, seed=0)
    prompts = [{"prompt_token_ids": list(prompt)} for prompt, _ in requests]
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True),
                 use_tqdm=False)
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for _, n in requests]
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    token_ids = [list(o.outputs[0].token_ids) for o in outputs]
    tokens = sum(len(t) for t in token_ids)
    if tokens != sum(n for _, n in requests):
        raise RuntimeError(f"vllm generated {tokens} tokens, expected "
                           f"{sum(n for _, n in requests)}")
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "first_token_s": [o.metrics.first_token_latency for o in outputs],
        "token_ids": token_ids,
        "preemptions": sum(o.metrics.num_preemptions for o in outputs),
    }
