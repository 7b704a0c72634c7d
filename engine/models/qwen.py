"""Qwen2/2.5 and Qwen3 (dense) as what they change of the Llama decoder.

Qwen2: biases on q_proj, k_proj and v_proj (none on o_proj). Qwen3: `q_norm` and `k_norm`
(RMSNorm over head_dim, before RoPE), biases only if `attention_bias`, and an explicit
`head_dim` (which `LlamaArgs` already reads). Both refuse sliding-window attention.
"""

from __future__ import annotations

from dataclasses import replace

from engine.models.llama import LlamaArgs


def _refuse_sliding_window(cfg: dict) -> None:
    if cfg.get("use_sliding_window"):
        raise ValueError("model: use_sliding_window: true is not supported "
                         "(sliding-window attention is not built yet)")


def qwen2_args(cfg: dict) -> LlamaArgs:
    """`Qwen2ForCausalLM`'s `config.json` (ValueError for sliding-window attention)."""
    _refuse_sliding_window(cfg)
    return replace(LlamaArgs.from_hf_config(cfg), qkv_bias=True, o_bias=False)


def qwen3_args(cfg: dict) -> LlamaArgs:
    """`Qwen3ForCausalLM`'s `config.json` (ValueError for sliding-window attention)."""
    _refuse_sliding_window(cfg)
    return replace(LlamaArgs.from_hf_config(cfg), qk_norm=True)
