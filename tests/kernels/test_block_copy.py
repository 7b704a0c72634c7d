from __future__ import annotations

import pytest
import torch

from agentix_kernels.block_copy import gather_blocks, gather_blocks_ref, scatter_blocks, scatter_blocks_ref

# A small block-major KV cache: [num_blocks, num_layers, 2, block_size, kv_heads, head_dim].
SHAPE = (9, 2, 2, 16, 2, 16)


def _cache(dtype: torch.dtype, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(SHAPE, generator=gen).to(dtype).to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("impl", [gather_blocks_ref, gather_blocks], ids=["ref", "triton"])
def test_gather_into_larger_staging_buffer(dtype, impl, device):
    src = _cache(dtype, device)
    block_ids = torch.tensor([7, 2, 5, 1], dtype=torch.int64, device=device)
    staging = torch.zeros((6, *SHAPE[1:]), dtype=dtype, device=device)
    impl(src, block_ids, staging)
    for i, b in enumerate([7, 2, 5, 1]):
        assert torch.equal(staging[i], src[b])  # bit-exact, bf16 included
    assert not staging[4:].any()  # rows past n untouched


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("impl", [scatter_blocks_ref, scatter_blocks], ids=["ref", "triton"])
def test_scatter_from_larger_staging_buffer(dtype, impl, device):
    staging = _cache(dtype, device, seed=1)[:6]
    dst = _cache(dtype, device, seed=2)
    before = dst.clone()
    block_ids = torch.tensor([3, 8, 0], dtype=torch.int64, device=device)
    impl(staging, block_ids, dst)
    for i, b in enumerate([3, 8, 0]):
        assert torch.equal(dst[b], staging[i])
    untouched = [b for b in range(SHAPE[0]) if b not in (3, 8, 0)]
    assert torch.equal(dst[untouched], before[untouched])


@pytest.mark.parametrize("gather, scatter", [(gather_blocks_ref, scatter_blocks_ref),
                                             (gather_blocks, scatter_blocks)],
                         ids=["ref", "triton"])
def test_round_trip_and_empty(gather, scatter, device):
    src = _cache(torch.float32, device)
    ids = torch.tensor([4, 6], dtype=torch.int64, device=device)
    staging = torch.empty((2, *SHAPE[1:]), device=device)
    gather(src, ids, staging)
    dst = torch.zeros_like(src)
    scatter(staging, ids, dst)
    assert torch.equal(dst[ids], src[ids])
    assert not dst[[0, 1, 2, 3, 5, 7, 8]].any()
    gather(src, ids[:0], staging)  # n = 0: a no-op
    scatter(staging, ids[:0], dst)
    assert torch.equal(dst[ids], src[ids])


def test_too_many_ids_for_staging_raise_value_error(device):
    src = _cache(torch.float32, device)
    staging = torch.empty((1, *SHAPE[1:]), device=device)
    ids = torch.tensor([1, 2], dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="rows"):
        gather_blocks_ref(src, ids, staging)
