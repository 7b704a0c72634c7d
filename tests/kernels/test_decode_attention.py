from __future__ import annotations

import pytest
import torch

from agentix_kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref

# Every pair of (dtype, GQA ratio, block size) values once: the interpreter is slow.
PAIRWISE = [
    (torch.float32, 1, 16), (torch.float32, 2, 32), (torch.float32, 4, 16),
    (torch.float16, 1, 32), (torch.float16, 2, 16), (torch.float16, 4, 32),
]
HEAD_DIM = 16
NUM_KV_HEADS = 2
CONTEXTS = [1, 5, 0, 17, 40]  # ragged, with one padding row (context 0)


def _query(batch: int, num_q_heads: int, dtype: torch.dtype, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return torch.randn(batch, num_q_heads, HEAD_DIM, generator=gen).to(dtype).to(device)


@pytest.mark.parametrize("dtype, group, block_size", PAIRWISE)
def test_triton_and_reference_match_naive(dtype, group, block_size, device, make_paged_kv,
                                          naive_attention, assert_close):
    kv = make_paged_kv(CONTEXTS, block_size=block_size, num_kv_heads=NUM_KV_HEADS,
                       head_dim=HEAD_DIM, dtype=dtype)
    q = _query(len(CONTEXTS), NUM_KV_HEADS * group, dtype, device)
    scale = HEAD_DIM ** -0.5
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, scale)
    assert not kv.k_cache.is_contiguous()

    ref = paged_decode_attention_ref(*args)
    tri = paged_decode_attention(*args)

    assert ref.shape == q.shape and ref.dtype == dtype
    for i, n in enumerate(CONTEXTS):
        if n == 0:
            continue
        expected = naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i], scale)[0]
        assert_close(ref[i], expected.to(dtype))
    assert not ref[2].any() and not tri[2].any()  # the padding row is zeros
    assert_close(tri, ref)


@pytest.mark.parametrize("block_size", [12, 16])
def test_reference_with_full_last_blocks_and_any_block_size(block_size, device, make_paged_kv,
                                                           naive_attention, assert_close):
    contexts = [block_size, 2 * block_size, 3, 0, 2 * block_size + 1]
    kv = make_paged_kv(contexts, block_size=block_size, num_kv_heads=NUM_KV_HEADS,
                       head_dim=HEAD_DIM, dtype=torch.float32)
    q = _query(len(contexts), NUM_KV_HEADS * 3, torch.float32, device)
    scale = HEAD_DIM ** -0.5
    out = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables,
                                     kv.context_lens, scale)
    for i, n in enumerate(contexts):
        if n:
            assert_close(out[i], naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i],
                                                 scale)[0].float())
    assert not out[3].any()


def test_reference_copes_with_k_and_v_laid_out_differently(device, make_paged_kv,
                                                          naive_attention, assert_close):
    # K stays a strided view of the block-major cache, V becomes contiguous: the reference
    # can no longer index both through one slot numbering and compacts them first.
    kv = make_paged_kv(CONTEXTS, block_size=16, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q = _query(len(CONTEXTS), NUM_KV_HEADS * 2, torch.float32, device)
    scale = HEAD_DIM ** -0.5
    out = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache.contiguous(), kv.block_tables,
                                     kv.context_lens, scale)
    for i, n in enumerate(CONTEXTS):
        if n:
            assert_close(out[i], naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i],
                                                 scale)[0].float())
    assert not out[2].any()


def test_all_rows_padding_give_zeros(device, make_paged_kv):
    kv = make_paged_kv([0, 0], block_size=16, num_kv_heads=1, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q = _query(2, 2, torch.float32, device)
    for fn in (paged_decode_attention_ref, paged_decode_attention):
        out = fn(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.25)
        assert out.shape == q.shape and not out.any()


def test_bad_head_ratio_raises_value_error(device, make_paged_kv):
    kv = make_paged_kv([3], block_size=16, num_kv_heads=2, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q = _query(1, 3, torch.float32, device)
    with pytest.raises(ValueError, match="multiple"):
        paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens,
                                   1.0)


def test_triton_rejects_block_size_not_power_of_two(device, make_paged_kv):
    kv = make_paged_kv([3], block_size=12, num_kv_heads=1, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q = _query(1, 1, torch.float32, device)
    with pytest.raises(ValueError, match="power of two"):
        paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 1.0)


def test_a_step_cache_reuses_the_index_across_layers_of_one_layout(make_paged_kv):
    from agentix_kernels.decode_attention import DecodeIndex

    kv = make_paged_kv([1, 5, 0, 17, 40], block_size=16, num_kv_heads=2, head_dim=16,
                       dtype=torch.float32)
    q = _query(5, 4, torch.float32, kv.k_cache.device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.25)
    cache: dict = {}
    first = paged_decode_attention_ref(*args, step_cache=cache)
    [index] = cache.values()
    assert isinstance(index, DecodeIndex) and index.num_segs == 5 * 4
    assert index.n == (1 + 1 + 0 + 2 + 3) * 4   # blocks per row, times the query heads
    # A second layer (other values, same layout) reuses it and matches a fresh computation.
    q2 = q.flip(0).contiguous()
    again = paged_decode_attention_ref(q2, *args[1:], step_cache=cache)
    assert list(cache.values()) == [index]
    assert torch.equal(again, paged_decode_attention_ref(q2, *args[1:]))
    assert torch.equal(first, paged_decode_attention_ref(*args))
