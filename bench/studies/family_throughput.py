"""Tokens/s of each model family the engine loads, against transformers `generate`, on small
random models of one shape, in one run.

    python -m bench.studies.family_throughput [--families llama,qwen2,...] [--num 16]
                                              [--output-tokens 64]

Each family's model has the same size (hidden 256, 4 layers, 8 query heads over 2 KV heads,
MLP 1,024, vocabulary 4,096; fp32) with its own features: Qwen2 biases, Qwen3 q/k norms,
Mistral's sliding window (`mistral-window`: 32 tokens, shorter than every prompt), Falcon's
parallel attention and MLP. The engine (`bench.support.engine_run.run_agentix`) and transformers
(`bench.support.hf_baseline.run_hf_generate`, one static batch) generate the same random prompts;
the table gives both rates (the best of `--repeats` runs each, in turn), their ratio, and
each family's engine rate against Llama's (the per-family overhead).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path
from typing import Sequence

from bench.support.engine_run import run_agentix
from bench.support.hf_baseline import run_hf_generate
from server.config_flags import name_list

SHAPE = dict(vocab_size=4096, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
             bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
# family -> (transformers class prefix, config fields besides SHAPE)
FAMILIES = {
    "llama": ("Llama", {}),
    "qwen2": ("Qwen2", {}),
    "qwen3": ("Qwen3", {"head_dim": 32}),
    "mistral": ("Mistral", {"sliding_window": None}),
    "mistral-window": ("Mistral", {"sliding_window": 32}),
    "falcon": ("Falcon", {"new_decoder_architecture": True, "num_kv_heads": 2,
                          "ffn_hidden_size": 1024, "parallel_attn": True, "bias": False}),
}


def build(family: str, path: Path) -> str:
    """Save a random model of `family` at `path` (seed 0); returns the directory."""
    import torch
    import transformers

    prefix, extra = FAMILIES[family]
    fields = {**SHAPE, **extra}
    if prefix == "Falcon":  # Falcon names its KV heads and MLP width its own way
        fields.pop("num_key_value_heads")
        fields.pop("intermediate_size")
    torch.manual_seed(0)
    config = getattr(transformers, f"{prefix}Config")(**fields)
    getattr(transformers, f"{prefix}ForCausalLM")(config).eval().save_pretrained(path)
    return str(path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES),
                        type=lambda text: name_list(text, FAMILIES, "--families"))
    parser.add_argument("--num", type=int, default=16, help="prompts (one static HF batch)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="runs per engine; best kept")
    args = parser.parse_args(argv)
    rng = random.Random(0)
    requests = [([rng.randrange(3, SHAPE["vocab_size"]) for _ in range(args.prompt_tokens)],
                 args.output_tokens) for _ in range(args.num)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            model_dir = build(family, Path(tmp) / family)
            engine = max(run_agentix(model_dir, requests, dict(num_kv_blocks=1024))
                         ["tokens_per_s"] for _ in range(args.repeats))
            hf = max(run_hf_generate(model_dir, requests, batch_size=args.num)["tokens_per_s"]
                     for _ in range(args.repeats))
            rows.append((family, engine, hf))
    base = dict((f, e) for f, e, _ in rows).get("llama")
    print(f"{args.num} prompts of {args.prompt_tokens} tokens, {args.output_tokens} generated "
          "each, fp32, 2 threads\n")
    print("| family | agentix tokens/s | transformers tokens/s | agentix / transformers "
          "| agentix vs llama |")
    print("| --- | --- | --- | --- | --- |")
    for family, engine, hf in rows:
        versus = f"{engine / base:.2f}x" if base else "-"
        print(f"| {family} | {engine:.1f} | {hf:.1f} | {engine / hf:.2f}x | {versus} |")


if __name__ == "__main__":
    main()
