"""Mistral as what it changes of the Llama decoder: nothing but an optional sliding attention
window over every layer (v0.1: 4,096 tokens; later versions: none)."""

from __future__ import annotations

from dataclasses import replace

from engine.models.llama import LlamaArgs


def mistral_args(cfg: dict) -> LlamaArgs:
    """`MistralForCausalLM`'s `config.json`: `sliding_window` (null: none) on every layer."""
    args = LlamaArgs.from_hf_config(cfg)
    window = cfg.get("sliding_window")
    return replace(args, layer_windows=(int(window),) * args.num_layers) if window else args
