"""BulkSwapper driven by KVCacheManager pairs: exact bytes back, one transfer per batch."""

from collections import Counter

import pytest
import torch

import agentix_kernels as kernels
from kvcache import KVCacheManager
from kvcache.kv_tensor import KVCacheSpec
from kvcache.swap import BulkSwapper

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.fixture
def block_ops(monkeypatch) -> Counter:
    """Counts calls of kernels.gather_blocks / scatter_blocks (still doing the copies)."""
    calls: Counter = Counter()
    for name in ("gather_blocks", "scatter_blocks"):
        op = getattr(kernels, name)

        def counted(src, block_ids, dst, op=op, name=name):
            calls[name] += 1
            op(src, block_ids, dst)

        monkeypatch.setattr(kernels, name, counted)
    return calls


def random_kv(device: str, dtype: torch.dtype) -> torch.Tensor:
    spec = KVCacheSpec(num_blocks=16, num_layers=2, block_size=4, num_kv_heads=2, head_dim=8,
                       dtype=dtype)
    gen = torch.Generator().manual_seed(0)
    return torch.randn((spec.num_blocks, *spec.block_shape), generator=gen).to(device, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_swap_out_then_in_restores_the_exact_bytes(device, dtype, block_ops):
    kv = random_kv(device, dtype)
    original = kv.clone()
    mgr = KVCacheManager(num_blocks=16, block_size=4, num_host_blocks=8)
    for call_id, num_tokens in (("a", 8), ("b", 12), ("c", 4)):
        assert mgr.allocate(call_id, num_tokens)
    old_tables = {c: mgr.block_table(c) for c in "abc"}
    assert old_tables == {"a": [1, 2], "b": [3, 4, 5], "c": [6]}
    swapper = BulkSwapper(kv, num_host_blocks=8)

    pairs = mgr.swap_out(["a", "b", "c"])
    swapper.swap_out(pairs)
    assert (swapper.num_copies, swapper.num_blocks_out) == (1, 6)
    assert block_ops == {"gather_blocks": 1, "scatter_blocks": 1}
    assert mgr.allocate("d", 24)  # takes 7..12 and overwrites the freed blocks too
    kv[1:16] = -1

    pairs = mgr.swap_in(["a", "b", "c"])
    assert [mgr.block_table(c) for c in "abc"] == [[13, 14], [15, 2, 1], [5]]
    swapper.swap_in(pairs)
    assert (swapper.num_copies, swapper.num_blocks_in) == (2, 6)
    assert block_ops == {"gather_blocks": 2, "scatter_blocks": 2}
    for call_id, old in old_tables.items():
        new = mgr.block_table(call_id)
        assert torch.equal(kv[new].view(torch.uint8), original[old].view(torch.uint8))
    assert torch.equal(kv[0], original[0])
    mgr.check_integrity()


def test_a_shared_block_may_be_copied_to_two_host_blocks(block_ops):
    kv = random_kv("cpu", torch.float32)
    swapper = BulkSwapper(kv, num_host_blocks=4)
    swapper.swap_out([(3, 0), (3, 1), (5, 2)])
    assert torch.equal(swapper.host_cache[:3], kv[[3, 3, 5]])
    assert not swapper.host_cache[3].any()
    assert swapper.num_copies == 1


def test_empty_batches_copy_nothing(block_ops):
    swapper = BulkSwapper(random_kv("cpu", torch.float32), num_host_blocks=2)
    swapper.swap_out([])
    swapper.swap_in([])
    assert (swapper.num_copies, swapper.num_blocks_out, swapper.num_blocks_in) == (0, 0, 0)
    assert not block_ops


def test_bad_pairs_raise_value_error_naming_the_field():
    swapper = BulkSwapper(random_kv("cpu", torch.float32), num_host_blocks=2)
    with pytest.raises(ValueError, match="pairs: block 2"):
        swapper.swap_out([(1, 2)])
    with pytest.raises(ValueError, match="pairs: block 16"):
        swapper.swap_in([(0, 16)])
    with pytest.raises(ValueError, match="pairs"):
        swapper.swap_in([(0, 3), (1, 3)])
    with pytest.raises(ValueError, match="num_host_blocks"):
        BulkSwapper(random_kv("cpu", torch.float32), num_host_blocks=-1)
    assert swapper.num_copies == 0
