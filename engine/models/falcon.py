"""Falcon with the new decoder architecture (Falcon-40B/180B: `new_decoder_architecture:
true`) as what it changes of the Llama decoder.

Each layer runs attention and the MLP side by side off the same residual,
`x + attn(ln_attn(x)) + mlp(ln_mlp(x))` (one shared `input_layernorm` when
`num_ln_in_parallel_attn` is 1), with LayerNorms (weight and bias), a GELU MLP
(`dense_h_to_4h`, `dense_4h_to_h`), one fused `query_key_value` projection laid out per KV
group (the group's query heads, then its key head, then its value head), a `dense` output
projection, and biases on all four linears when `bias`. RoPE, paged attention and the
LM head are Llama's. Module names match Hugging Face's checkpoints, so weights load by name.

Refused before loading (ValueError naming the field): the old layout (Falcon-7B, RW),
ALiBi, sequential attention and MLP, other activations and RoPE types.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping

import torch
from torch import nn
from torch.nn import functional as F

from engine.models.attention import AttentionMetadata, paged_attention
from engine.models.layers import CausalLM, RotaryEmbedding, apply_rope


@dataclass(frozen=True)
class FalconArgs:
    """`engine.models.args.ModelArgs` plus Falcon's own fields."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int          # ffn_hidden_size
    num_layers: int
    num_heads: int
    num_kv_heads: int               # KV groups
    head_dim: int                   # hidden_size // num_heads
    layer_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bias: bool                      # biases on query_key_value, dense and the MLP
    num_ln_in_parallel_attn: int    # 2: ln_attn and ln_mlp; 1: input_layernorm for both
    rope_scaling: None = None       # Falcon's RoPE is never scaled,
    max_window: int = 0             # and its attention never windowed
    # config.json's names of the fields that are named otherwise here (for error messages).
    CONFIG_NAMES: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"num_heads": "num_attention_heads", "num_kv_heads": "num_kv_heads",
         "intermediate_size": "ffn_hidden_size"})

    @classmethod
    def from_hf_config(cls, cfg: dict) -> FalconArgs:
        """`FalconForCausalLM`'s `config.json` (transformers 4 or 5 layout, its defaults);
        ValueError naming the first field the engine cannot run."""
        _check_supported(cfg)
        rope = _rope_parameters(cfg)
        heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=hidden,
            intermediate_size=cfg.get("ffn_hidden_size") or 4 * hidden,
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_kv_heads") or heads,
            head_dim=hidden // heads,
            layer_norm_eps=cfg.get("layer_norm_epsilon", 1e-5),
            rope_theta=float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0))),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
            bias=bool(cfg.get("bias", False)),
            num_ln_in_parallel_attn=cfg.get("num_ln_in_parallel_attn") or 2,
        )


def _rope_parameters(cfg: dict) -> dict:
    """The RoPE dict: transformers 5's `rope_parameters`, or 4's `rope_scaling` (or none)."""
    return cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}


def _check_supported(cfg: dict) -> None:
    """ValueError naming the first field of a Falcon config the engine cannot run."""
    if not cfg.get("new_decoder_architecture", False):
        raise ValueError("model: new_decoder_architecture: false is not supported (only the "
                         "Falcon-40B/180B layout is built)")
    if cfg.get("alibi", False):
        raise ValueError("model: alibi: true is not supported (only rotary positions are built)")
    if not cfg.get("parallel_attn", True):
        raise ValueError("model: parallel_attn: false is not supported (only attention and "
                         "MLP in parallel are built)")
    if cfg.get("num_ln_in_parallel_attn") not in (None, 1, 2):
        raise ValueError(f"model: num_ln_in_parallel_attn {cfg['num_ln_in_parallel_attn']!r} "
                         f"is not supported (1 or 2)")
    if cfg.get("activation", "gelu") != "gelu":
        raise ValueError(f"model: activation {cfg['activation']!r} is not supported (gelu)")
    rope = _rope_parameters(cfg)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"model: rope_type {rope_type!r} is not supported (default)")


class FalconAttention(nn.Module):
    def __init__(self, args: FalconArgs) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            args.num_heads, args.num_kv_heads, args.head_dim)
        fused = (args.num_heads + 2 * args.num_kv_heads) * args.head_dim
        self.query_key_value = nn.Linear(args.hidden_size, fused, bias=args.bias)
        self.dense = nn.Linear(args.num_heads * args.head_dim, args.hidden_size, bias=args.bias)
        self.scale = args.head_dim ** -0.5

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                kv: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata) -> torch.Tensor:
        """Query head h reads KV group h // (num_heads / num_kv_heads), as in the checkpoint's
        per-group layout `[group: its query heads, key, value]`."""
        t = x.shape[0]
        qkv = self.query_key_value(x).view(t, self.num_kv_heads, -1, self.head_dim)
        q = qkv[:, :, :-2].reshape(t, self.num_heads, self.head_dim)
        k, v = qkv[:, :, -2], qkv[:, :, -1]
        out = paged_attention(apply_rope(q, rope), apply_rope(k, rope), v, kv[0], kv[1], meta,
                              self.scale)
        return self.dense(out.reshape(t, -1))


class FalconMLP(nn.Module):
    def __init__(self, args: FalconArgs) -> None:
        super().__init__()
        self.dense_h_to_4h = nn.Linear(args.hidden_size, args.intermediate_size, bias=args.bias)
        self.dense_4h_to_h = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class FalconDecoderLayer(nn.Module):
    def __init__(self, args: FalconArgs) -> None:
        super().__init__()
        self.self_attention = FalconAttention(args)
        self.mlp = FalconMLP(args)
        self.two_norms = args.num_ln_in_parallel_attn == 2
        if self.two_norms:
            self.ln_attn = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)
            self.ln_mlp = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)
        else:
            self.input_layernorm = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)

    def forward(self, x, rope, kv, meta) -> torch.Tensor:
        if self.two_norms:
            attn_in, mlp_in = self.ln_attn(x), self.ln_mlp(x)
        else:
            attn_in = mlp_in = self.input_layernorm(x)
        return x + (self.mlp(mlp_in) + self.self_attention(attn_in, rope, kv, meta))


class FalconModel(nn.Module):
    def __init__(self, args: FalconArgs, max_positions: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
        self.h = nn.ModuleList(FalconDecoderLayer(args) for _ in range(args.num_layers))
        self.ln_f = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)
        self.rotary = RotaryEmbedding(args.head_dim, max_positions, args.rope_theta, None)


class FalconForCausalLM(CausalLM):
    """Falcon under the engine's model contract (`CausalLM`)."""

    def __init__(self, args: FalconArgs, max_positions: int) -> None:
        super().__init__()
        self.args = args
        self.transformer = FalconModel(args, max_positions)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.transformer.word_embeddings.weight

    def decoder(self):
        t = self.transformer
        return t.word_embeddings, t.rotary, t.h, t.ln_f
