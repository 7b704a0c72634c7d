"""Llama building blocks: RMSNorm, rotary embedding (with Llama-3 scaling), SwiGLU MLP.

Numerics follow Hugging Face's LlamaForCausalLM so greedy tokens match it exactly: norms in
fp32 then cast back, RoPE tables computed in fp32 as `position * inv_freq`, rotate-half layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3 frequency scaling (`rope_type == "llama3"`); `factor == 1` means none."""

    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None:
        return inv_freq
    old_len = scaling.original_max_position_embeddings
    low_wavelen = old_len / scaling.low_freq_factor
    high_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin tables for positions [0, max_positions); `forward` picks a step's."""

    def __init__(self, head_dim: int, max_positions: int, theta: float,
                 scaling: RopeScaling | None) -> None:
        super().__init__()
        inv_freq = rope_inv_freq(head_dim, theta, scaling)
        freqs = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        sign = torch.ones(head_dim)
        sign[: head_dim // 2] = -1
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin_signed", emb.sin() * sign, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tables of the tokens at `positions` `[T]` for `apply_rope`: cos and sin with its
        first half negated, each `[T, 1, D]` in `dtype`. Gather them once per step."""
        return (self.cos[positions].unsqueeze(1).to(dtype),
                self.sin_signed[positions].unsqueeze(1).to(dtype))


def apply_rope(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate `x` `[T, H, D]` by `RotaryEmbedding.forward`'s tables: Hugging Face's
    `x * cos + rotate_half(x) * sin` bit for bit, as `rotate_half(x) * sin` is exactly `x`
    with its halves swapped times the signed sin (negation commutes with rounding)."""
    cos, sin_signed = rope
    swapped = x.roll(x.shape[-1] // 2, -1)
    return (x * cos).add_(swapped.mul_(sin_signed))


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x), inplace=True).mul_(self.up_proj(x)))


class CausalLM(nn.Module):
    """The engine's model contract, shared by every family: `forward` runs a flattened token
    batch through the decoder (`decoder()`: its embedding, RoPE tables, layers and final
    norm, under the checkpoint's own module names) and returns hidden states; `logits`
    projects only the rows that are sampled, in fp32. `kv_layers[i]` are layer i's (K, V)
    cache views; `meta` the step's `AttentionMetadata`."""

    lm_head: nn.Linear

    def decoder(self) -> tuple[nn.Module, RotaryEmbedding, nn.ModuleList, nn.Module]:
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_layers: list[tuple[torch.Tensor, torch.Tensor]], meta) -> torch.Tensor:
        embed, rotary, layers, norm = self.decoder()
        x = embed(input_ids)
        rope = rotary(positions, x.dtype)
        for layer, kv in zip(layers, kv_layers):
            x = layer(x, rope, kv, meta)
        return norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()
