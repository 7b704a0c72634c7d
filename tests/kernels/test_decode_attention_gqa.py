"""The Triton paged decode kernel's GQA grouping and split-K against naive attention."""

from __future__ import annotations

import pytest
import torch

from agentix_kernels._decode_attention_triton import num_splits  # after conftest chose the interpreter
from agentix_kernels.decode_attention import paged_decode_attention

HEAD_DIM = 16
NUM_KV_HEADS = 2
# Ragged, with a padding row (0) and one row long enough (38 blocks of 16) for 2 splits, whose
# second split is empty for every other row.
CONTEXTS = [1, 0, 17, 40, 600]


def _query(batch: int, num_q_heads: int, head_dim: int, dtype: torch.dtype,
           device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    return torch.randn(batch, num_q_heads, head_dim, generator=gen).to(dtype).to(device)


def _check_against_naive(contexts, *, group, dtype, block_size, head_dim, num_kv_heads, device,
                         make_paged_kv, naive_attention, assert_close) -> int:
    """Run the Triton path on a fresh paged cache, compare every row with naive attention
    (context-0 rows with zeros); return the number of splits the launch used."""
    kv = make_paged_kv(contexts, block_size=block_size, num_kv_heads=num_kv_heads,
                       head_dim=head_dim, dtype=dtype)
    q = _query(len(contexts), num_kv_heads * group, head_dim, dtype, device)
    scale = head_dim ** -0.5
    out = paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens,
                                 scale)
    assert out.shape == q.shape and out.dtype == dtype
    for i, n in enumerate(contexts):
        if n == 0:
            assert not out[i].any()
        else:
            expected = naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i], scale)[0]
            assert_close(out[i], expected.to(dtype))
    return num_splits(kv.block_tables.shape[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("group", [1, 3, 4, 8])
def test_grouped_split_kernel_matches_naive(group, dtype, device, make_paged_kv, naive_attention,
                                            assert_close):
    splits = _check_against_naive(CONTEXTS, group=group, dtype=dtype, block_size=16,
                                  head_dim=HEAD_DIM, num_kv_heads=NUM_KV_HEADS, device=device,
                                  make_paged_kv=make_paged_kv, naive_attention=naive_attention,
                                  assert_close=assert_close)
    assert splits == 2


def test_short_contexts_take_one_split(device, make_paged_kv, naive_attention, assert_close):
    splits = _check_against_naive([3, 0, 33, 512], group=4, dtype=torch.float32, block_size=16,
                                  head_dim=HEAD_DIM, num_kv_heads=NUM_KV_HEADS, device=device,
                                  make_paged_kv=make_paged_kv, naive_attention=naive_attention,
                                  assert_close=assert_close)
    assert splits == 1


def test_small_blocks_and_odd_head_dim_over_several_splits(device, make_paged_kv,
                                                           naive_attention, assert_close):
    # 8-token blocks: a 16-key tile spans two blocks; 780 keys = 98 blocks -> 4 splits of 25
    # blocks (200 keys, whole tiles: 208); head_dim 12 is padded to 16.
    splits = _check_against_naive([780, 5, 0, 230], group=3, dtype=torch.float16, block_size=8,
                                  head_dim=12, num_kv_heads=1, device=device,
                                  make_paged_kv=make_paged_kv, naive_attention=naive_attention,
                                  assert_close=assert_close)
    assert splits == 4


@pytest.mark.parametrize("max_blocks, expected", [
    (0, 1), (1, 1), (32, 1), (33, 2), (64, 2), (65, 3), (511, 16), (512, 16), (513, 16),
    (100_000, 16),
])
def test_num_splits_rule(max_blocks, expected):
    assert num_splits(max_blocks) == expected
