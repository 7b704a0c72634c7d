"""How a model splits over tensor-parallel ranks (engine/parallel/layout.py): exact slices,
replicated KV heads, and the errors that name the field."""

from __future__ import annotations

import pytest

from engine.models.llama import LlamaArgs
from engine.parallel.layout import ShardLayout, check_split


def args(heads: int = 4, kv: int = 2, intermediate: int = 128, vocab: int = 384) -> LlamaArgs:
    return LlamaArgs(vocab_size=vocab, hidden_size=64, intermediate_size=intermediate,
                     num_layers=2, num_heads=heads, num_kv_heads=kv, head_dim=16,
                     rms_norm_eps=1e-5, rope_theta=1e4, rope_scaling=None,
                     max_position_embeddings=256, tie_word_embeddings=False)


def test_two_ranks_two_kv_heads():
    a, b = ShardLayout(args(), 0, 2), ShardLayout(args(), 1, 2)
    assert (a.num_heads, a.num_kv_heads, b.num_heads, b.num_kv_heads) == (2, 1, 2, 1)
    assert (a.heads(), b.heads()) == (slice(0, 32), slice(32, 64))
    assert (a.kv_heads(), b.kv_heads()) == (slice(0, 16), slice(16, 32))
    assert (a.intermediate(), b.intermediate()) == (slice(0, 64), slice(64, 128))
    assert (a.vocab(), b.vocab(), a.vocab_per_rank) == (slice(0, 192), slice(192, 384), 192)


def test_four_kv_heads_split_two_each():
    layouts = [ShardLayout(args(kv=4), r, 2) for r in range(2)]
    assert [(x.first_kv_head, x.num_kv_heads, x.kv_heads()) for x in layouts] == [
        (0, 2, slice(0, 32)), (2, 2, slice(32, 64))]


def test_fewer_kv_heads_than_ranks_are_replicated():
    # 4 query heads, 1 KV head, 2 ranks: both ranks hold a copy of KV head 0.
    layouts = [ShardLayout(args(kv=1), r, 2) for r in range(2)]
    assert [(x.num_heads, x.num_kv_heads, x.kv_heads()) for x in layouts] == [
        (2, 1, slice(0, 16)), (2, 1, slice(0, 16))]
    # 8 query heads, 2 KV heads, 4 ranks: ranks 0-1 read KV head 0, ranks 2-3 KV head 1.
    layouts = [ShardLayout(args(heads=8, kv=2), r, 4) for r in range(4)]
    assert [x.first_kv_head for x in layouts] == [0, 0, 1, 1]
    assert [x.kv_heads() for x in layouts] == [slice(0, 16)] * 2 + [slice(16, 32)] * 2


def test_uneven_vocab_pads_the_last_rank():
    layouts = [ShardLayout(args(vocab=385), r, 2) for r in range(2)]
    assert [x.vocab() for x in layouts] == [slice(0, 193), slice(193, 385)]
    assert layouts[1].vocab_per_rank == 193   # the last rank's 192 rows are padded to 193


@pytest.mark.parametrize("model, world, message", [
    (args(heads=4), 3, "does not divide the model's num_attention_heads 4"),
    (args(heads=6, kv=3), 2, "must divide or be a multiple of the model's "
                             "num_key_value_heads 3"),
    (args(intermediate=130), 4, "does not divide the model's intermediate_size 130"),
    (args(), 0, "tensor_parallel_size must be an int >= 1"),
    (args(), True, "tensor_parallel_size must be an int >= 1"),
])
def test_bad_splits_name_the_field(model, world, message):
    with pytest.raises(ValueError, match="tensor_parallel_size") as info:
        check_split(model, world)
    assert message in str(info.value)


def test_rank_out_of_range():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        ShardLayout(args(), 2, 2)
