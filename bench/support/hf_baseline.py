"""The transformers half of the throughput benchmark: static batches through `generate`.

    python -m bench.support.hf_baseline --num 8 --batch-size 8 --max-output-tokens 64

samples ShareGPT requests with the SmolLM2 tokenizer and runs `run_hf_generate` in a fresh
process (`bench.support.measure`), printing the request statistics and the result as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from bench.sim.sharegpt import Request
from bench.support.measure import peak_rss_mb



def run_hf_generate(
    model_dir: str | Path,
    requests: Sequence[Request],
    batch_size: int,
    dtype: torch.dtype | str = torch.float32,
    warmup: bool = True,
) -> dict[str, Any]:
    """Greedy `AutoModelForCausalLM.generate` over `requests` in order, in static batches of
    `batch_size`, left-padded. Each batch generates exactly as many tokens as its longest
    request (`min_new_tokens == max_new_tokens`, so EOS never ends it early), as a static
    batcher does. `dtype` may be given by name ("float32", "bfloat16") for JSON callers.

    Returns `tokens` (useful tokens: the sum of each request's own output length), `seconds`
    (wall time of the generate calls only; loading and the optional 2-token warm-up excluded),
    `tokens_per_s`, `computed_tokens` (batch rows x tokens generated, padding waste included),
    `batches` and `peak_rss_mb` of this process (comparable between engines only when each
    runs in its own process; see `bench.support.measure.run_in_subprocess`). Uses 2 torch threads.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if not requests:
        raise ValueError("requests: must not be empty")
    for i, (prompt, output_len) in enumerate(requests):
        if len(prompt) < 1 or output_len < 1:
            raise ValueError(f"requests[{i}]: needs a non-empty prompt and output length >= 1")
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype).eval()
    pad_id = model.generation_config.pad_token_id
    if pad_id is None:
        pad_id = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 0
    batches = [requests[i : i + batch_size] for i in range(0, len(requests), batch_size)]
    with torch.inference_mode():
        if warmup:
            generate_batch(model, batches[0][:1], 2, pad_id)
        computed = 0
        start = time.perf_counter()
        for batch in batches:
            new_tokens = max(output_len for _, output_len in batch)
            generate_batch(model, batch, new_tokens, pad_id)
            computed += len(batch) * new_tokens
        seconds = time.perf_counter() - start
    tokens = sum(output_len for _, output_len in requests)
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "computed_tokens": computed,
        "batches": len(batches),
        "peak_rss_mb": peak_rss_mb(),
    }


def generate_batch(model: Any, batch: Sequence[Request], new_tokens: int, pad_id: int) -> None:
    """One left-padded greedy batch generating exactly `new_tokens` tokens per row."""
    width = max(len(prompt) for prompt, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (prompt, _) in enumerate(batch):
        input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=pad_id,
    )
    if out.shape[1] - width != new_tokens:
        raise RuntimeError(f"generate produced {out.shape[1] - width} tokens, expected {new_tokens}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt-tokens", type=int, default=1024)
    parser.add_argument("--max-output-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from bench.sim.sharegpt import describe, sample_requests
    from bench.support.measure import run_in_subprocess
    from engine.models.smollm2 import ensure_smollm2_dir

    model_dir = ensure_smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    requests = sample_requests(tokenizer, args.num, args.seed, args.max_prompt_tokens, args.max_output_tokens)
    print(describe(requests))
    kwargs = {"model_dir": str(model_dir), "requests": requests, "batch_size": args.batch_size, "dtype": args.dtype}
    print(json.dumps(run_in_subprocess("bench.support.hf_baseline:run_hf_generate", kwargs)))


if __name__ == "__main__":
    main()
