from __future__ import annotations

import pytest
import torch

from agentix_kernels.store_kv import store_kvcache, store_kvcache_ref

NUM_BLOCKS, NUM_LAYERS, HEAD_DIM = 6, 2, 16


def _cache(block_size: int, num_kv_heads: int, dtype: torch.dtype, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    shape = (NUM_BLOCKS, NUM_LAYERS, 2, block_size, num_kv_heads, HEAD_DIM)
    return torch.randn(shape, generator=gen).to(dtype).to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_triton_matches_reference_and_skips_padding(dtype, block_size, num_kv_heads, device):
    kv = _cache(block_size, num_kv_heads, dtype, device)
    # Slots in shuffled blocks, two padding tokens (-1) in between.
    slots = [3 * block_size + 5, -1, 1 * block_size, 5 * block_size + block_size - 1, -1,
             2 * block_size + 7, 1 * block_size + 1]
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=device)
    gen = torch.Generator().manual_seed(2)
    key = torch.randn(len(slots), num_kv_heads, HEAD_DIM, generator=gen).to(dtype).to(device)
    value = torch.randn(len(slots), num_kv_heads, HEAD_DIM, generator=gen).to(dtype).to(device)

    expected = kv.clone()
    for t, slot in enumerate(slots):
        if slot >= 0:
            expected[slot // block_size, 1, 0, slot % block_size] = key[t]
            expected[slot // block_size, 1, 1, slot % block_size] = value[t]

    ref, tri = kv.clone(), kv.clone()
    store_kvcache_ref(key, value, ref[:, 1, 0], ref[:, 1, 1], slot_mapping)
    store_kvcache(key, value, tri[:, 1, 0], tri[:, 1, 1], slot_mapping)
    assert torch.equal(ref, expected)  # exactly those slots, nothing else (other layer untouched)
    assert torch.equal(tri, expected)


def test_all_padding_and_empty_write_nothing(device):
    kv = _cache(16, 2, torch.float32, device)
    key = torch.ones(3, 2, HEAD_DIM, device=device)
    pad = torch.full((3,), -1, dtype=torch.int64, device=device)
    for fn in (store_kvcache_ref, store_kvcache):
        out = kv.clone()
        fn(key, key, out[:, 0, 0], out[:, 0, 1], pad)
        fn(key[:0], key[:0], out[:, 0, 0], out[:, 0, 1], pad[:0])
        assert torch.equal(out, kv)


def test_mismatched_shapes_raise_value_error(device):
    kv = _cache(16, 2, torch.float32, device)
    key = torch.ones(3, 1, HEAD_DIM, device=device)  # wrong kv head count
    slots = torch.zeros(3, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="kv_heads"):
        store_kvcache_ref(key, key, kv[:, 0, 0], kv[:, 0, 1], slots)
