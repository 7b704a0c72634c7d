"""The cost of the HTTP door and of /metrics: one server serving gRPC and HTTP, the same closed-loop
trace driven through each in alternating rounds (`python -m bench.studies.http_vs_grpc`).

A round sends `--calls` streamed calls, `--concurrency` at a time, each a prompt of
`--prompt-tokens` random token ids (seeded by round kind and call, so every kind gets the same
prompts) and `--max-tokens` output tokens with `ignore_eos`. The kinds are: gRPC
(`AsyncAgentixClient.stream`), HTTP (the `openai` SDK's streamed `/v1/completions`), and HTTP
while another client scrapes `/metrics` every `--scrape-interval` seconds; with `--router`, also
gRPC and HTTP through `agentix router` (a process of its own, the server its one replica: the
router's hop and its HTTP door, which tokenizes and parses there). Prefix caching is
off so a later round gains nothing from an earlier one. Kinds alternate within each repeat,
so machine noise falls on all of them alike; the figures are tokens received per second of
round, and their ratios to gRPC. The clients run in a process of their own, so their work
does not share the server's interpreter (the /metrics scraper is a thread of the server's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor

KINDS = ("grpc", "http", "http+metrics")
ROUTER_KINDS = ("router-grpc", "router-http")


def prompts(calls: int, prompt_tokens: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(prompt_tokens)] for _ in range(calls)]


async def _grpc_round(address: str, batch: list[list[int]], max_tokens: int,
                      concurrency: int) -> int:
    from server.client import AsyncAgentixClient, Completion

    gate = asyncio.Semaphore(concurrency)
    async with AsyncAgentixClient(address) as client:
        async def one(prompt: list[int]) -> int:
            async with gate:
                async for item in client.stream(prompt, max_tokens=max_tokens,
                                                ignore_eos=True, temperature=0.0):
                    if isinstance(item, Completion):
                        return len(item.token_ids)
            return 0

        return sum(await asyncio.gather(*(one(p) for p in batch)))


async def _http_round(address: str, batch: list[list[int]], max_tokens: int,
                      concurrency: int) -> int:
    import openai

    gate = asyncio.Semaphore(concurrency)
    async with openai.AsyncOpenAI(base_url=f"http://{address}/v1", api_key="unused",
                                  max_retries=0) as client:
        async def one(prompt: list[int]) -> int:
            async with gate:
                stream = await client.completions.create(
                    model="bench", prompt=prompt, max_tokens=max_tokens, temperature=0,
                    stream=True, stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True})
                tokens = 0
                async for chunk in stream:
                    if chunk.usage is not None:
                        tokens = chunk.usage.completion_tokens
                return tokens

        return sum(await asyncio.gather(*(one(p) for p in batch)))


def _scrape_until(stop: threading.Event, address: str, interval: float) -> int:
    scrapes = 0
    while not stop.wait(interval):
        with urllib.request.urlopen(f"http://{address}/metrics") as response:
            response.read()
        scrapes += 1
    return scrapes


def client_round(kind: str, address: str, batch: list[list[int]], max_tokens: int,
                 concurrency: int) -> tuple[int, float]:
    """(tokens received, seconds) of one round (run in the client process)."""
    started = time.perf_counter()
    round_of = _grpc_round if kind.endswith("grpc") else _http_round
    tokens = asyncio.run(round_of(address, batch, max_tokens, concurrency))
    return tokens, time.perf_counter() - started


def run_round(kind: str, addresses: dict[str, str], client: ProcessPoolExecutor,
              batch: list[list[int]], max_tokens: int, concurrency: int,
              scrape_interval: float) -> float:
    """Tokens per second of one round of `kind` at `addresses[kind]`, its client in the
    `client` process (so that client work does not share the server's interpreter)."""
    stop = threading.Event()
    scraper = None
    if kind == "http+metrics":
        scraper = threading.Thread(target=_scrape_until,
                                   args=(stop, addresses["http"], scrape_interval))
        scraper.start()
    address = addresses[kind]
    try:
        tokens, seconds = client.submit(client_round, kind, address, batch, max_tokens,
                                        concurrency).result()
    finally:
        stop.set()
        if scraper is not None:
            scraper.join()
    if tokens != len(batch) * max_tokens:
        raise RuntimeError(f"{kind}: received {tokens} tokens, expected "
                           f"{len(batch) * max_tokens}")
    return tokens / seconds


def start_router(replica: str, model: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """`agentix router` over `replica` (gRPC and HTTP), and its addresses by kind."""
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "router", "--replica", replica, "--port", "0",
         "--http-port", "0", "--model", model, "--served-model-name", "bench",
         "--placement", "round_robin"], stdout=subprocess.PIPE, text=True)
    addresses: dict[str, str] = {}
    for prefix, kind in (("agentix router serving on ", "router-grpc"),
                         ("http serving on ", "router-http")):
        line = process.stdout.readline()
        if not line.startswith(prefix):
            process.kill()
            raise RuntimeError(f"router: expected {prefix!r}, got {line!r}")
        addresses[kind] = line[len(prefix):].strip()
    return process, addresses


def main(argv: list[str] | None = None) -> None:
    from engine import EngineConfig
    from engine.models.smollm2 import ensure_smollm2_dir
    from server.app import start_server

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scrape-interval", type=float, default=0.5)
    parser.add_argument("--router", action="store_true",
                        help="also through `agentix router` (gRPC and its HTTP door)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    model = args.model or str(ensure_smollm2_dir())
    kinds = KINDS + (ROUTER_KINDS if args.router else ())
    config = EngineConfig.from_flat(model=model, policy="atlas", max_num_seqs=args.concurrency,
                                    enable_prefix_caching=False, preemption_mode="recompute",
                                    ttft_slo_tokens=None)  # as measured
    server = start_server(config, port=0, http_port=0, served_model_name="bench")
    addresses = {"grpc": server.address, "http": server.http_address,
                 "http+metrics": server.http_address}
    router = None
    client = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        if args.router:
            router, routed = start_router(server.address, model)
            addresses.update(routed)
        vocab = server.engine_loop.call(lambda engine: engine.vocab_size)
        warm = prompts(args.concurrency, args.prompt_tokens, vocab, seed=-1)
        for kind in kinds:  # imports, connections, first steps: outside the figures
            run_round(kind, addresses, client, warm, args.max_tokens, args.concurrency, 1.0)
        rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        for repeat in range(args.repeats):
            batch = prompts(args.calls, args.prompt_tokens, vocab, seed=repeat)
            for kind in kinds:
                rates[kind].append(run_round(kind, addresses, client, batch, args.max_tokens,
                                             args.concurrency, args.scrape_interval))
    finally:
        client.shutdown()
        if router is not None:
            router.terminate()
            router.wait(30)
        server.stop(grace=0)
    median = {kind: statistics.median(values) for kind, values in rates.items()}
    figures = {"tokens_per_second": median, "rounds": rates,
               "ratio_to_grpc": {kind: median[kind] / median["grpc"] for kind in kinds}}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for kind in kinds:
        print(f"{kind:>13}: {median[kind]:7.1f} tokens/s (median of {args.repeats}), "
              f"{median[kind] / median['grpc']:.3f}x gRPC; rounds "
              f"{', '.join(f'{r:.1f}' for r in rates[kind])}")


if __name__ == "__main__":
    main()
