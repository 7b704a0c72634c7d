"""Tensor-parallel shards of a loaded Llama or Falcon model (`shard_model`).

Column-parallel: q/k/v (with their biases) and gate/up keep this rank's output rows, so each
rank computes its own heads and its own intermediate slice with no communication; q_norm and
k_norm (over head_dim, the same for every head) stay whole on every rank. Row-parallel: o_proj
and down_proj keep this rank's input columns and all-reduce their partial outputs (o_proj's
bias, whole on every rank, is added once after the sum). Vocab-parallel: the embedding and
the LM head keep this rank's vocab rows (padded to the same count on every rank); the
embedding all-reduces (each token's row is nonzero on one rank only), the head all-gathers its
logits, so every rank returns the full vocabulary.

Falcon alike: query_key_value keeps the rows of this rank's query heads and KV groups
(`ShardLayout.fused_qkv_rows`) and dense_h_to_4h its intermediate rows; dense and
dense_4h_to_h are row-parallel (their biases added once after the sum); the LayerNorms stay
whole on every rank.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from engine.models.falcon import FalconForCausalLM
from engine.models.llama import LlamaForCausalLM
from engine.parallel.comm import Communicator
from engine.parallel.layout import ShardLayout


def _frozen(tensor: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(tensor.contiguous().clone(), requires_grad=False)


def _linear(weight: nn.Parameter) -> nn.Linear:
    """A bias-free Linear over `weight` (shared, not copied), so that
    `engine.models.cpu_linear.pack_linears` finds and packs it like any other."""
    out = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    out.weight = weight
    return out


def _rows(linear: nn.Linear, rows: slice | list[slice]) -> nn.Linear:
    """A Linear keeping `rows` (one slice, or several concatenated in order) of `linear`'s
    outputs, and of its bias (column-parallel)."""
    parts = rows if isinstance(rows, list) else [rows]
    out = _linear(_frozen(torch.cat([linear.weight[part] for part in parts])))
    if linear.bias is not None:
        out.bias = _frozen(torch.cat([linear.bias[part] for part in parts]))
    return out


class RowParallelLinear(nn.Module):
    """`linear` keeping input columns `cols` (in `self.linear`, without the bias); the
    partial outputs are summed over ranks, then its bias (if any) is added."""

    def __init__(self, linear: nn.Linear, cols: slice, comm: Communicator) -> None:
        super().__init__()
        self.linear = _linear(_frozen(linear.weight[:, cols]))
        self.bias = None if linear.bias is None else _frozen(linear.bias)
        self.comm = comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.comm.all_reduce(self.linear(x))
        return out if self.bias is None else out.add_(self.bias)


def _vocab_shard(weight: torch.Tensor, layout: ShardLayout) -> torch.Tensor:
    """This rank's vocab rows of `weight`, zero-padded to `layout.vocab_per_rank` rows."""
    rows = weight[layout.vocab()]
    pad = layout.vocab_per_rank - rows.shape[0]
    return torch.cat([rows, rows.new_zeros(pad, rows.shape[1])]) if pad else rows


class VocabParallelEmbedding(nn.Module):
    def __init__(self, weight: nn.Parameter, layout: ShardLayout, comm: Communicator) -> None:
        super().__init__()
        self.weight = weight
        self.start = layout.vocab().start
        self.comm = comm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        mine = (local >= 0) & (local < self.weight.shape[0])
        x = F.embedding(torch.where(mine, local, torch.zeros_like(local)), self.weight)
        return self.comm.all_reduce(x * mine.unsqueeze(-1).to(x.dtype))


class ParallelLMHead(nn.Module):
    """This rank's vocab rows of the head (in `self.linear`); every rank returns the logits
    of the whole vocabulary."""

    def __init__(self, weight: nn.Parameter, vocab_size: int, comm: Communicator) -> None:
        super().__init__()
        self.linear = _linear(weight)
        self.vocab_size = vocab_size
        self.comm = comm

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.comm.all_gather(self.linear(hidden))[..., :self.vocab_size]


def shard_model(model: LlamaForCausalLM | FalconForCausalLM, layout: ShardLayout,
                comm: Communicator) -> LlamaForCausalLM | FalconForCausalLM:
    """Replace `model`'s full weights by rank `layout.rank`'s shards, in place (the full
    weights are released as they are replaced); returns the model."""
    if isinstance(model, FalconForCausalLM):
        _shard_falcon(model, layout, comm)
    else:
        _shard_llama(model, layout, comm)
    return model


def _shard_vocab(model: nn.Module, embedding: nn.Embedding, layout: ShardLayout,
                 comm: Communicator) -> VocabParallelEmbedding:
    """Set `model.lm_head` to its vocab-parallel shard (the embedding's own when tied);
    returns the embedding's, for the caller to put in place."""
    embed = _frozen(_vocab_shard(embedding.weight, layout))
    head = embed if layout.args.tie_word_embeddings else _frozen(
        _vocab_shard(model.lm_head.weight, layout))
    model.lm_head = ParallelLMHead(head, layout.args.vocab_size, comm)
    return VocabParallelEmbedding(embed, layout, comm)


def _shard_llama(model: LlamaForCausalLM, layout: ShardLayout, comm: Communicator) -> None:
    inner = model.model
    inner.embed_tokens = _shard_vocab(model, inner.embed_tokens, layout, comm)
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.num_heads, attn.num_kv_heads = layout.num_heads, layout.num_kv_heads
        attn.q_proj = _rows(attn.q_proj, layout.heads())
        attn.k_proj = _rows(attn.k_proj, layout.kv_heads())
        attn.v_proj = _rows(attn.v_proj, layout.kv_heads())
        attn.o_proj = RowParallelLinear(attn.o_proj, layout.heads(), comm)
        mlp.gate_proj = _rows(mlp.gate_proj, layout.intermediate())
        mlp.up_proj = _rows(mlp.up_proj, layout.intermediate())
        mlp.down_proj = RowParallelLinear(mlp.down_proj, layout.intermediate(), comm)


def _shard_falcon(model: FalconForCausalLM, layout: ShardLayout, comm: Communicator) -> None:
    inner = model.transformer
    inner.word_embeddings = _shard_vocab(model, inner.word_embeddings, layout, comm)
    for layer in inner.h:
        attn, mlp = layer.self_attention, layer.mlp
        attn.num_heads, attn.num_kv_heads = layout.num_heads, layout.num_kv_heads
        attn.query_key_value = _rows(attn.query_key_value, layout.fused_qkv_rows())
        attn.dense = RowParallelLinear(attn.dense, layout.heads(), comm)
        mlp.dense_h_to_4h = _rows(mlp.dense_h_to_4h, layout.intermediate())
        mlp.dense_4h_to_h = RowParallelLinear(mlp.dense_4h_to_h, layout.intermediate(), comm)
