"""RoPE: the engine's per-step tables and cat-free rotation equal transformers' bit for bit."""

from __future__ import annotations

import pytest
import torch

from engine.models.layers import RopeScaling, RotaryEmbedding, apply_rope

THETA, HEAD_DIM, MAX_POSITIONS = 100000.0, 64, 4096
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("llama3", [False, True])
def test_rotation_equals_transformers_bit_for_bit(dtype, llama3):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb)

    rope_parameters = dict(rope_type="llama3" if llama3 else "default", rope_theta=THETA,
                           **(LLAMA3 if llama3 else {}))
    hf_rope = LlamaRotaryEmbedding(LlamaConfig(
        hidden_size=9 * HEAD_DIM, num_attention_heads=9, num_key_value_heads=3,
        head_dim=HEAD_DIM, max_position_embeddings=MAX_POSITIONS,
        rope_parameters=rope_parameters))
    rope = RotaryEmbedding(HEAD_DIM, MAX_POSITIONS, THETA,
                           RopeScaling(**LLAMA3) if llama3 else None)
    gen = torch.Generator().manual_seed(0)
    positions = torch.randint(0, MAX_POSITIONS, (50,), generator=gen)
    q = (torch.randn(50, 9, HEAD_DIM, generator=gen) * 4).to(dtype)
    k = (torch.randn(50, 3, HEAD_DIM, generator=gen) * 4).to(dtype)

    cos, sin = hf_rope(q, positions[None])  # [1, T, D]
    # transformers' layout is [batch, heads, T, D]; ours [T, heads, D].
    ref_q, ref_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                        cos, sin)
    tables = rope(positions, dtype)
    assert torch.equal(apply_rope(q, tables), ref_q[0].transpose(0, 1))
    assert torch.equal(apply_rope(k, tables), ref_k[0].transpose(0, 1))
