"""advise_huge_pages: the advice is given for a large contiguous CPU tensor on Linux (where the
kernel has transparent huge pages), never otherwise, and changes no value; the CPU KV cache
is allocated with it and still zeroed."""

import sys
from pathlib import Path

import pytest
import torch

from kvcache.huge_pages import HUGE_PAGE_BYTES, advise_huge_pages, zeros_on_huge_pages
from kvcache.kv_tensor import KVCacheSpec, allocate_kv_cache

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
CAN_ADVISE = sys.platform.startswith("linux") and THP.exists()


def test_a_large_tensor_is_advised_where_the_kernel_has_huge_pages():
    tensor = torch.empty(4 * HUGE_PAGE_BYTES // 4, dtype=torch.float32)  # 8 MiB: 3+ whole pages
    assert advise_huge_pages(tensor) is CAN_ADVISE


def test_the_advice_changes_no_value():
    tensor = torch.arange(3 * HUGE_PAGE_BYTES // 4, dtype=torch.float32)
    before = tensor.clone()
    advise_huge_pages(tensor)
    assert torch.equal(tensor, before)


@pytest.mark.parametrize("tensor", [
    torch.empty(HUGE_PAGE_BYTES // 8, dtype=torch.float32),  # 1 MiB: no whole huge page
    torch.empty(4, 3 * HUGE_PAGE_BYTES // 4, dtype=torch.float32)[:, ::2],  # not contiguous
    torch.empty(0),
], ids=["small", "strided", "empty"])
def test_nothing_is_advised_without_a_whole_huge_page_or_contiguous_memory(tensor):
    assert advise_huge_pages(tensor) is False


def test_the_cpu_kv_cache_is_zeroed_after_the_advice():
    spec = KVCacheSpec(num_blocks=256, num_layers=4, block_size=16, num_kv_heads=2,
                       head_dim=64, dtype=torch.float32)  # 32 KiB a block: 8 MiB in all
    kv = allocate_kv_cache(spec, "cpu")
    assert kv.shape == (256, 4, 2, 16, 2, 64) and kv.is_contiguous() and not kv.any()


def test_zeros_on_huge_pages_is_a_zeroed_contiguous_cpu_tensor():
    tensor = zeros_on_huge_pages((3, HUGE_PAGE_BYTES // 4), torch.float32)  # 6 MiB
    assert (tensor.shape, tensor.dtype, tensor.device.type) == \
        ((3, HUGE_PAGE_BYTES // 4), torch.float32, "cpu")
    assert tensor.is_contiguous() and not tensor.any()
