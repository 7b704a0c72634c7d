"""What the engine reads of a model's args, whatever its family (`ModelArgs`)."""

from __future__ import annotations

from typing import Mapping, Protocol

from engine.models.layers import RopeScaling


class ModelArgs(Protocol):
    """The fields every family's (frozen) args carry (`LlamaArgs`, `FalconArgs`): the shapes
    that size the KV cache and split the model over tensor-parallel ranks, the RoPE tables,
    the vocabulary, the context and the attention window. Read-only."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int          # the MLP's width
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rope_scaling: RopeScaling | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    max_window: int                 # the widest sliding window if every layer has one, else 0
    CONFIG_NAMES: Mapping[str, str]  # config.json's names of fields named otherwise here
