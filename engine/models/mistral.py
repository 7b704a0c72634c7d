"""Mistral as what it changes of the Llama decoder: nothing but an optional sliding attention
window (v0.1: 4,096 tokens; later versions: none), which the engine does not build yet."""

from __future__ import annotations

from engine.models.llama import LlamaArgs


def mistral_args(cfg: dict) -> LlamaArgs:
    """`MistralForCausalLM`'s `config.json` (ValueError when a sliding window shorter than the
    model's context would apply)."""
    args = LlamaArgs.from_hf_config(cfg)
    window = cfg.get("sliding_window")
    if window is not None and window < args.max_position_embeddings:
        raise ValueError(f"model: sliding_window {window} is not supported (sliding-window "
                         f"attention is not built yet)")
    return args
