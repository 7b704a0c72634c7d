"""The `agentix` command line. `agentix demo` serves SmolLM2 and runs three agent programs
against it; `agentix generate` answers a few chat prompts offline; `agentix serve` runs the
gRPC server until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine import EngineConfig

DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Give me three tips for staying focused while studying.",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU does.",
)


def _generate(args: argparse.Namespace) -> None:
    from engine import LLM, SamplingParams
    from engine.models.smollm2 import ensure_smollm2_dir

    model = args.model or str(ensure_smollm2_dir())
    llm = LLM(model, dtype=args.dtype, device=args.device, policy=args.policy)
    tokenizer = llm.engine.tokenizer
    if tokenizer is None:
        raise SystemExit(f"{model} has no tokenizer: agentix generate needs one")
    prompts = args.prompt or list(DEFAULT_PROMPTS)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                            max_tokens=args.max_tokens)
    started = time.perf_counter()
    outputs = llm.generate([tokenizer.chat_prompt(p) for p in prompts], params)
    seconds = time.perf_counter() - started
    for prompt, out in zip(prompts, outputs):
        print(f"### {prompt}\n{out.text.strip()}\n[{len(out.token_ids)} tokens, "
              f"finish={out.finish_reason}]\n")
    total = sum(len(o.token_ids) for o in outputs)
    print(f"{len(outputs)} calls, {total} tokens in {seconds:.1f}s "
          f"({total / seconds:.1f} tokens/s) on {args.device}")


def serve_config(args: argparse.Namespace, model: str) -> EngineConfig:
    """The engine config of `agentix serve` (SystemExit naming the bad flag's field)."""
    from engine import EngineConfig

    try:
        return EngineConfig(model=model, policy=args.policy, dtype=args.dtype,
                            device=args.device, enable_prefix_caching=not args.no_prefix_caching,
                            num_host_blocks=args.num_host_blocks, kv_memory=args.kv_memory,
                            preemption_mode=args.preemption_mode)
    except ValueError as exc:
        raise SystemExit(f"agentix serve: {exc}") from None


def _serve(args: argparse.Namespace) -> None:
    from engine.models.smollm2 import ensure_smollm2_dir
    from server.app import ServeOptions, serve_forever
    from server.auth import load_tokens

    try:
        tokens = load_tokens(args.auth_token_file) if args.auth_token_file else None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"agentix serve: --auth-token-file: {exc}") from None
    config = serve_config(args, args.model or str(ensure_smollm2_dir()))

    def ready(running) -> None:
        print(f"agentix serving on {running.address}", flush=True)

    options = ServeOptions(host=args.host, port=args.port, auth_tokens=tokens,
                           max_waiting=args.max_waiting, grace=args.grace)
    serve_forever(config, options, on_ready=ready)


def _demo(args: argparse.Namespace) -> None:
    from server.demo import main as run_demo

    run_demo(model=args.model, dtype=args.dtype)


def _bench(args: argparse.Namespace) -> None:
    """`agentix bench ...` is `bench.cli`'s command line (all arguments passed through)."""
    from bench.cli import main as bench_main

    bench_main(args.bench_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="answer chat prompts with the offline engine")
    gen.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    gen.add_argument("--prompt", action="append", help="a user message (repeatable)")
    gen.add_argument("--max-tokens", type=int, default=96)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--dtype", default="float32")
    gen.add_argument("--device", default="cpu")
    gen.add_argument("--policy", default="fcfs")
    gen.set_defaults(run=_generate)
    serve = sub.add_parser("serve", help="run the gRPC server (agentix.v1.Agentix)")
    serve.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    serve.add_argument("--policy", default="atlas")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051, help="0: pick a free port")
    serve.add_argument("--auth-token-file", help="'TOKEN TENANT' lines; turns on auth")
    serve.add_argument("--max-waiting", type=int, default=1024,
                       help="waiting calls beyond which Generate is RESOURCE_EXHAUSTED")
    serve.add_argument("--grace", type=float, default=5.0,
                       help="seconds calls in flight get to finish on shutdown")
    serve.add_argument("--dtype", default="float32")
    serve.add_argument("--device", default="cpu")
    serve.add_argument("--no-prefix-caching", action="store_true",
                       help="turn the prefix cache off (on by default)")
    serve.add_argument("--num-host-blocks", type=int, default=0,
                       help="host KV blocks: swap space and the host tier of the prefix cache")
    serve.add_argument("--kv-memory", default="program",
                       help="'program' (priority-ranked eviction, retention) or 'lru'")
    serve.add_argument("--preemption-mode", default="auto",
                       help="recompute, swap, keep or auto (cheapest per preemption)")
    serve.set_defaults(run=_serve)
    demo = sub.add_parser("demo", help="serve SmolLM2 (ATLAS) and run three agent programs")
    demo.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    demo.add_argument("--dtype", default="float32")
    demo.set_defaults(run=_demo)
    bench = sub.add_parser("bench", add_help=False,
                           help="benchmarks: 'agentix bench sim --help' (see bench/cli.py)")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    bench.set_defaults(run=_bench)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":  # pass everything through, options before "sim" too
        args.bench_args = extra + args.bench_args
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.run(args)


if __name__ == "__main__":
    main()
