"""Llama-family decoder over a paged KV cache (GQA, Llama-3 RoPE scaling, tied or untied
embeddings). Module names match Hugging Face's checkpoints, so weights load by name.

The flags `qkv_bias`, `o_bias`, `qk_norm` and `layer_windows` of `LlamaArgs` make the same
decoder the other families' (`engine.models.qwen`, `engine.models.mistral`;
`engine.models.registry` picks a config's reader)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping

import torch
from torch import nn

from engine.models.attention import AttentionMetadata, paged_attention
from engine.models.layers import (CausalLM, RMSNorm, RopeScaling, RotaryEmbedding, SwiGLU,
                                  apply_rope)


@dataclass(frozen=True)
class LlamaArgs:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool = False   # biases on q_proj, k_proj, v_proj
    o_bias: bool = False     # a bias on o_proj
    qk_norm: bool = False    # q_norm, k_norm: RMSNorm over each q and k head, before RoPE
    # Per layer, its sliding attention window in tokens (0: full attention); empty: none.
    layer_windows: tuple[int, ...] = ()
    # config.json's names of the fields that are named otherwise here (for error messages).
    CONFIG_NAMES: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads"})

    @property
    def max_window(self) -> int:
        """The widest window of a layer with one, 0 when some layer attends to everything (a
        call's KV blocks before it are then still read)."""
        if not self.layer_windows or 0 in self.layer_windows:
            return 0
        return max(self.layer_windows)

    @classmethod
    def from_hf_config(cls, cfg: dict) -> "LlamaArgs":
        """Read a Hugging Face `config.json` dict (transformers 4 or 5 layout)."""
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = None
        if rope.get("rope_type", rope.get("type")) == "llama3":
            scaling = RopeScaling(
                factor=float(rope["factor"]),
                low_freq_factor=float(rope["low_freq_factor"]),
                high_freq_factor=float(rope["high_freq_factor"]),
                original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
            )
        elif rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"rope_type {rope.get('rope_type')!r} is not supported")
        heads = cfg["num_attention_heads"]
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", False)),
            o_bias=bool(cfg.get("attention_bias", False)),
        )


class LlamaAttention(nn.Module):
    def __init__(self, args: LlamaArgs, window: int = 0) -> None:
        super().__init__()
        self.window = window
        self.num_heads, self.num_kv_heads, self.head_dim = (
            args.num_heads, args.num_kv_heads, args.head_dim)
        q_out, kv_out = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
        self.q_proj = nn.Linear(args.hidden_size, q_out, bias=args.qkv_bias)
        self.k_proj = nn.Linear(args.hidden_size, kv_out, bias=args.qkv_bias)
        self.v_proj = nn.Linear(args.hidden_size, kv_out, bias=args.qkv_bias)
        self.o_proj = nn.Linear(q_out, args.hidden_size, bias=args.o_bias)
        self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps) if args.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps) if args.qk_norm else nn.Identity()
        self.scale = args.head_dim ** -0.5

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                kv: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata) -> torch.Tensor:
        """`rope`: the step's `RotaryEmbedding` tables, shared by all layers."""
        t = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(t, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(t, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        out = paged_attention(apply_rope(q, rope), apply_rope(k, rope), v, kv[0], kv[1], meta,
                              self.scale, self.window)
        return self.o_proj(out.reshape(t, -1))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = LlamaAttention(args, args.layer_windows[index] if args.layer_windows
                                        else 0)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = SwiGLU(args.hidden_size, args.intermediate_size)

    def forward(self, x, rope, kv, meta) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, kv, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, args: LlamaArgs, max_positions: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = RotaryEmbedding(args.head_dim, max_positions, args.rope_theta,
                                      args.rope_scaling)


class LlamaForCausalLM(CausalLM):
    """The Llama family under the engine's model contract (`CausalLM`)."""

    def __init__(self, args: LlamaArgs, max_positions: int) -> None:
        super().__init__()
        self.args = args
        self.model = LlamaModel(args, max_positions)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def decoder(self):
        m = self.model
        return m.embed_tokens, m.rotary, m.layers, m.norm
