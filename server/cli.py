"""The `agentix` command line. `agentix generate` answers a few chat prompts offline."""

from __future__ import annotations

import argparse
import time

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


def main(argv: list[str] | None = None) -> None:
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
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
