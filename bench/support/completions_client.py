"""One client for every OpenAI door: all requests posted at once to `/v1/completions`, streamed,
each timed from the common submission instant to its first chunk and to its end."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

from bench.sim.sharegpt import Request


async def _one(client: Any, model: str, prompt: list[int], max_tokens: int, start: float
               ) -> tuple[float, int]:
    """(seconds to the first chunk with a choice, completion tokens from the usage chunk)."""
    stream = await client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    first, tokens = None, 0
    async for chunk in stream:
        if first is None and chunk.choices:
            first = time.perf_counter() - start
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    if first is None:
        raise RuntimeError(f"a stream of {max_tokens} tokens ended without a choice")
    return first, tokens


async def _all(base_url: str, model: str, requests: Sequence[Request]
               ) -> tuple[list[tuple[float, int]], float]:
    import openai

    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0,
                                  timeout=None) as client:
        start = time.perf_counter()
        done = await asyncio.gather(*(_one(client, model, list(p), n, start)
                                      for p, n in requests))
        return done, time.perf_counter() - start


def stream_completions(base_url: str, model: str, requests: Sequence[Request]) -> dict[str, Any]:
    """Post every request at once (prompt as token ids, `max_tokens` its own output length,
    temperature 0, `ignore_eos`, `stream` with usage) to `base_url`'s `/v1/completions`.
    Returns `tokens`, `seconds` (first post to last end), `tokens_per_s` and `first_token_s`
    (per request, from the common start to its first chunk). Raises RuntimeError when the
    tokens received are not the tokens asked for."""
    done, seconds = asyncio.run(_all(base_url, model, requests))
    tokens = sum(t for _, t in done)
    if tokens != sum(n for _, n in requests):
        raise RuntimeError(f"{base_url}: received {tokens} tokens, expected "
                           f"{sum(n for _, n in requests)}")
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "first_token_s": [first for first, _ in done]}
