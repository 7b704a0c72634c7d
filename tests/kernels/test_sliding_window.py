"""Sliding-window attention (`window` > 0) in both kernels, Triton and reference, against naive
dense attention: a query at position p sees keys p - window < k <= p only. Blocks wholly before
the window are filled with NaN: an output that stays finite and right proves they are never
read (the engine may free them)."""

from __future__ import annotations

import pytest
import torch

import agentix_kernels as kernels
from agentix_kernels._decode_attention_triton import num_splits  # after conftest chose the interpreter
from agentix_kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from agentix_kernels.prefill_attention import paged_prefill_attention, paged_prefill_attention_ref

HEAD_DIM = 16
NUM_KV_HEADS = 2
BLOCK_SIZE = 16


def _poison_before_window(kv, first_keys: list[int]) -> None:
    """NaN into every block of row i wholly before key `first_keys[i]`."""
    for row, first in enumerate(first_keys):
        for b in range(first // BLOCK_SIZE):
            block = int(kv.block_tables[row, b])
            kv.k_cache[block] = float("nan")
            kv.v_cache[block] = float("nan")


@pytest.mark.parametrize("window", [1, 7, 20, 100])
def test_decode_with_a_window(window, device, make_paged_kv, naive_attention, assert_close):
    # Ragged, a padding row, and one row of 38 blocks so the Triton kernel takes 2 splits: with
    # a short window the first split is wholly before it, and the combine must skip it.
    contexts = [1, 5, 0, 17, 40, 38 * BLOCK_SIZE - 3]
    kv = make_paged_kv(contexts, block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS,
                       head_dim=HEAD_DIM, dtype=torch.float32)
    _poison_before_window(kv, [max(0, n - window) for n in contexts])
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(len(contexts), NUM_KV_HEADS * 2, HEAD_DIM, generator=gen).to(device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.25)
    ref = paged_decode_attention_ref(*args, window=window)
    tri = paged_decode_attention(*args, window=window)
    assert num_splits(kv.block_tables.shape[1]) == 2
    for i, n in enumerate(contexts):
        if n:
            expected = naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i], 0.25, window)
            assert_close(ref[i], expected[0].float())
    assert not ref[2].any() and not tri[2].any()
    assert_close(tri, ref)


def test_decode_window_reuses_its_index_per_step_and_layer(device, make_paged_kv,
                                                           assert_close):
    """One step's layers share a `step_cache`: windowed and full layers each get their own
    index, so a model mixing them (Qwen2's `layer_types`) reads both right."""
    contexts = [30, 9]
    kv = make_paged_kv(contexts, block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS,
                       head_dim=HEAD_DIM, dtype=torch.float32)
    q = torch.randn(2, NUM_KV_HEADS, HEAD_DIM).to(device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.3)
    step_cache: dict = {}
    windowed = paged_decode_attention_ref(*args, step_cache, 9)
    full = paged_decode_attention_ref(*args, step_cache, 0)
    assert_close(windowed, paged_decode_attention_ref(*args, window=9))
    assert_close(full, paged_decode_attention_ref(*args))
    assert not torch.allclose(windowed[0], full[0])  # 30 keys > 9: the window changes row 0
    assert_close(windowed[1], full[1])  # 9 keys fit the window


@pytest.mark.parametrize("window", [1, 6, 33])
def test_prefill_with_a_window(window, device, make_paged_kv, naive_attention, assert_close):
    # (context, chunk): a chunk over a cached prefix longer than the window, a whole prompt
    # longer than one query tile (BLOCK_M = 32), a one-token chunk.
    chunks = [(60, 7), (35, 35), (50, 1), (5, 5)]
    contexts, q_lens = [c for c, _ in chunks], [n for _, n in chunks]
    kv = make_paged_kv(contexts, block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS,
                       head_dim=HEAD_DIM, dtype=torch.float32)
    _poison_before_window(kv, [max(0, c - n - window + 1) for c, n in chunks])
    gen = torch.Generator().manual_seed(6)
    q = torch.randn(sum(q_lens), NUM_KV_HEADS * 2, HEAD_DIM, generator=gen).to(device)
    starts = torch.tensor([0, *q_lens]).cumsum(0).to(torch.int32).to(device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, starts, kv.context_lens, 0.25)
    ref = paged_prefill_attention_ref(*args, window=window)
    tri = paged_prefill_attention(*args, window=window)
    for i in range(len(chunks)):
        lo, hi = int(starts[i]), int(starts[i + 1])
        expected = naive_attention(q[lo:hi], kv.dense_k[i], kv.dense_v[i], 0.25, window)
        assert_close(ref[lo:hi], expected.float())
    assert_close(tri, ref)


@pytest.mark.parametrize("window", [-1, 2.0])
def test_a_bad_window_is_refused(window, device, make_paged_kv):
    kv = make_paged_kv([3], block_size=BLOCK_SIZE, num_kv_heads=1, head_dim=HEAD_DIM,
                       dtype=torch.float32)
    q = torch.zeros(1, 1, HEAD_DIM, device=device)
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        kernels.paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables,
                                       kv.context_lens, 1.0, window=window)
