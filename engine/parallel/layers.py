"""Tensor-parallel shards of a loaded Llama model (`shard_model`).

Column-parallel: q/k/v (with their biases) and gate/up keep this rank's output rows, so each
rank computes its own heads and its own intermediate slice with no communication; q_norm and
k_norm (over head_dim, the same for every head) stay whole on every rank. Row-parallel: o_proj
and down_proj keep this rank's input columns and all-reduce their partial outputs (o_proj's
bias, whole on every rank, is added once after the sum). Vocab-parallel: the embedding and
the LM head keep this rank's vocab rows (padded to the same count on every rank); the
embedding all-reduces (each token's row is nonzero on one rank only), the head all-gathers its
logits, so every rank returns the full vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from engine.models.llama import LlamaForCausalLM
from engine.parallel.comm import Communicator
from engine.parallel.layout import ShardLayout


def _frozen(tensor: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(tensor.contiguous().clone(), requires_grad=False)


def _rows(linear: nn.Linear, rows: slice) -> nn.Linear:
    """A Linear keeping `rows` of `linear`'s outputs, and of its bias (column-parallel)."""
    weight = linear.weight[rows]
    out = nn.Linear(weight.shape[1], weight.shape[0], bias=linear.bias is not None,
                    device="meta")
    out.weight = _frozen(weight)
    if linear.bias is not None:
        out.bias = _frozen(linear.bias[rows])
    return out


class RowParallelLinear(nn.Module):
    """`linear` keeping input columns `cols`; the partial outputs are summed over ranks,
    then its bias (if any) is added."""

    def __init__(self, linear: nn.Linear, cols: slice, comm: Communicator) -> None:
        super().__init__()
        self.weight = _frozen(linear.weight[:, cols])
        self.bias = None if linear.bias is None else _frozen(linear.bias)
        self.comm = comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.comm.all_reduce(F.linear(x, self.weight))
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
    def __init__(self, weight: nn.Parameter, vocab_size: int, comm: Communicator) -> None:
        super().__init__()
        self.weight = weight
        self.vocab_size = vocab_size
        self.comm = comm

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.comm.all_gather(F.linear(hidden, self.weight))[..., :self.vocab_size]


def shard_model(model: LlamaForCausalLM, layout: ShardLayout,
                comm: Communicator) -> LlamaForCausalLM:
    """Replace `model`'s full weights by rank `layout.rank`'s shards, in place (the full
    weights are released as they are replaced); returns the model."""
    inner = model.model
    embed = _frozen(_vocab_shard(inner.embed_tokens.weight, layout))
    head = embed if layout.args.tie_word_embeddings else _frozen(
        _vocab_shard(model.lm_head.weight, layout))
    inner.embed_tokens = VocabParallelEmbedding(embed, layout, comm)
    model.lm_head = ParallelLMHead(head, layout.args.vocab_size, comm)
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
    return model
