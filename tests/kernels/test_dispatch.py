from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import agentix_kernels as kernels
from agentix_kernels import block_copy, decode_attention, prefill_attention, store_kv

REPO_ROOT = Path(__file__).resolve().parents[2]


def _forbid(*_args, **_kwargs):
    raise AssertionError("the Triton kernel was called for CPU tensors")


def test_cpu_tensors_never_reach_the_triton_kernels(monkeypatch, make_paged_kv):
    for module, name in [(store_kv, "store_kvcache"), (decode_attention, "paged_decode_attention"),
                         (prefill_attention, "paged_prefill_attention"),
                         (block_copy, "gather_blocks"), (block_copy, "scatter_blocks")]:
        monkeypatch.setattr(module, name, _forbid)
    kv = make_paged_kv([3, 20], block_size=16, num_kv_heads=1, head_dim=16, dtype=torch.float32)
    kv_cpu = kv.kv_cache.cpu()
    k, v = kv_cpu[:, 1, 0], kv_cpu[:, 1, 1]
    tables, lens = kv.block_tables.cpu(), kv.context_lens.cpu()

    kernels.store_kvcache(torch.zeros(1, 1, 16), torch.zeros(1, 1, 16), k, v,
                          torch.tensor([-1]))
    q = torch.randn(2, 2, 16)
    # float32 decode attention runs the native CPU kernel (tests/kernels/
    # test_native_decode_attention.py), within float32 rounding of the reference.
    out = kernels.paged_decode_attention(q, k, v, tables, lens, 0.25)
    torch.testing.assert_close(out, decode_attention.paged_decode_attention_ref(
        q, k, v, tables, lens, 0.25), atol=2e-6, rtol=1e-5)
    starts = torch.tensor([0, 1, 2], dtype=torch.int32)
    out = kernels.paged_prefill_attention(q, k, v, tables, starts, lens, 0.25)
    assert torch.equal(out, prefill_attention.paged_prefill_attention_ref(q, k, v, tables, starts,
                                                                          lens, 0.25))
    staging = torch.empty((1, *kv_cpu.shape[1:]))
    kernels.gather_blocks(kv_cpu, torch.tensor([2]), staging)
    kernels.scatter_blocks(staging, torch.tensor([3]), kv_cpu)
    torch.testing.assert_close(kv_cpu[3], kv_cpu[2], rtol=0, atol=0, equal_nan=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_use_the_triton_kernels(monkeypatch):
    monkeypatch.setattr(block_copy, "gather_blocks_ref", _forbid)
    src = torch.randn(4, 8, device="cuda")
    dst = torch.empty(2, 8, device="cuda")
    kernels.gather_blocks(src, torch.tensor([3, 1], device="cuda"), dst)
    assert torch.equal(dst, src[[3, 1]])


def test_import_without_triton_uses_references():
    # A CPU-only install may lack triton: `agentix_kernels` must import (without importing triton even
    # when it is there) and run the references; only a Triton entry point fails, on use.
    code = (
        "import sys, torch, agentix_kernels as kernels\n"
        "assert 'triton' not in sys.modules\n"
        "sys.modules['triton'] = None  # from here on, triton cannot be imported\n"
        "k = torch.zeros(2, 4, 1, 8); row = torch.ones(1, 1, 8)\n"
        "kernels.store_kvcache(row, row, k, k, torch.tensor([5]))\n"
        "assert k[1, 1].sum() == 8\n"
        "try:\n"
        "    kernels.store_kv.store_kvcache(row, row, k, k, torch.tensor([0]))\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('expected ImportError')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
