from __future__ import annotations

import pytest
import torch

from agentix_kernels.decode_attention import paged_decode_attention_ref
from agentix_kernels.prefill_attention import paged_prefill_attention, paged_prefill_attention_ref

# Every pair of (dtype, GQA ratio, block size) values once: the interpreter is slow.
PAIRWISE = [
    (torch.float32, 1, 16), (torch.float32, 2, 32), (torch.float32, 4, 16),
    (torch.float16, 1, 32), (torch.float16, 2, 16), (torch.float16, 4, 32),
]
HEAD_DIM = 16
NUM_KV_HEADS = 2
# (context_len, q_len): a chunk over a cached prefix, a whole prompt (no prefix), a single-token
# chunk over a prefix, a whole prompt longer than one query tile (BLOCK_M = 32).
CHUNKS = [(40, 7), (5, 5), (17, 1), (35, 35)]


def _queries(q_lens: list[int], num_q_heads: int, dtype: torch.dtype, device):
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(sum(q_lens), num_q_heads, HEAD_DIM, generator=gen).to(dtype).to(device)
    starts = torch.tensor([0, *q_lens], dtype=torch.int32).cumsum(0).to(torch.int32)
    return q, starts.to(device)


@pytest.mark.parametrize("dtype, group, block_size", PAIRWISE)
def test_triton_and_reference_match_naive(dtype, group, block_size, device, make_paged_kv,
                                          naive_attention, assert_close):
    contexts, q_lens = [c for c, _ in CHUNKS], [n for _, n in CHUNKS]
    kv = make_paged_kv(contexts, block_size=block_size, num_kv_heads=NUM_KV_HEADS,
                       head_dim=HEAD_DIM, dtype=dtype)
    q, starts = _queries(q_lens, NUM_KV_HEADS * group, dtype, device)
    scale = HEAD_DIM ** -0.5
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, starts, kv.context_lens, scale)

    ref = paged_prefill_attention_ref(*args)
    tri = paged_prefill_attention(*args)

    assert ref.shape == q.shape and ref.dtype == dtype
    for i in range(len(CHUNKS)):
        lo, hi = int(starts[i]), int(starts[i + 1])
        expected = naive_attention(q[lo:hi], kv.dense_k[i], kv.dense_v[i], scale)
        assert_close(ref[lo:hi], expected.to(dtype))
    assert_close(tri, ref)


def test_single_token_chunks_equal_decode(device, make_paged_kv, assert_close):
    contexts = [1, 9, 33]
    kv = make_paged_kv(contexts, block_size=16, num_kv_heads=1, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q, starts = _queries([1, 1, 1], 4, torch.float32, device)
    prefill = paged_prefill_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, starts,
                                      kv.context_lens, 0.3)
    decode = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables,
                                        kv.context_lens, 0.3)
    assert_close(prefill, decode)


def test_empty_chunk_in_batch(device, make_paged_kv, assert_close):
    # A sequence with q_len 0 contributes no rows and must not disturb its neighbours.
    kv = make_paged_kv([6, 4, 3], block_size=16, num_kv_heads=1, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q, starts = _queries([2, 0, 3], 1, torch.float32, device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, starts, kv.context_lens, 0.25)
    assert_close(paged_prefill_attention(*args), paged_prefill_attention_ref(*args))


def test_context_shorter_than_chunk_raises_value_error(device, make_paged_kv):
    kv = make_paged_kv([2], block_size=16, num_kv_heads=1, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q, starts = _queries([3], 1, torch.float32, device)
    with pytest.raises(ValueError, match="context_lens"):
        paged_prefill_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, starts,
                                    kv.context_lens, 1.0)


def test_odd_block_size_and_head_dim(device, make_paged_kv, assert_close):
    # The prefill kernel looks up each key's block, so any block size and head_dim work.
    kv = make_paged_kv([20, 9], block_size=8, num_kv_heads=2, head_dim=24, dtype=torch.float32)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(13, 4, 24, generator=gen).to(device)
    starts = torch.tensor([0, 4, 13], dtype=torch.int32, device=device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, starts, kv.context_lens, 0.2)
    assert_close(paged_prefill_attention(*args), paged_prefill_attention_ref(*args))
