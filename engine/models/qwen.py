"""Qwen2/2.5 and Qwen3 (dense) as what they change of the Llama decoder.

Qwen2: biases on q_proj, k_proj and v_proj (none on o_proj). Qwen3: `q_norm` and `k_norm`
(RMSNorm over head_dim, before RoPE), biases only if `attention_bias`, and an explicit
`head_dim` (which `LlamaArgs` already reads). Both take a sliding window on the layers that
`layer_types` (or, in older configs, `max_window_layers`) names, when `use_sliding_window`.
"""

from __future__ import annotations

from dataclasses import replace

from engine.models.llama import LlamaArgs


def _layer_windows(cfg: dict, num_layers: int) -> tuple[int, ...]:
    """Per layer its window (0: full attention), as transformers' Qwen configs set it:
    none without `use_sliding_window`; else `sliding_window` on the layers `layer_types`
    calls "sliding_attention", or without `layer_types` on layers >= `max_window_layers`."""
    window = cfg.get("sliding_window")
    if not cfg.get("use_sliding_window") or not window:
        return ()
    types = cfg.get("layer_types") or [
        "sliding_attention" if i >= cfg.get("max_window_layers", 0) else "full_attention"
        for i in range(num_layers)]
    if len(types) != num_layers:
        raise ValueError(f"model: layer_types has {len(types)} entries for {num_layers} layers")
    return tuple(int(window) if t == "sliding_attention" else 0 for t in types)


def qwen2_args(cfg: dict) -> LlamaArgs:
    """`Qwen2ForCausalLM`'s `config.json`."""
    args = LlamaArgs.from_hf_config(cfg)
    return replace(args, qkv_bias=True, o_bias=False,
                   layer_windows=_layer_windows(cfg, args.num_layers))


def qwen3_args(cfg: dict) -> LlamaArgs:
    """`Qwen3ForCausalLM`'s `config.json`."""
    args = LlamaArgs.from_hf_config(cfg)
    return replace(args, qk_norm=True, layer_windows=_layer_windows(cfg, args.num_layers))
