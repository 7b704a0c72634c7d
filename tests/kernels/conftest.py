"""Kernel tests: Triton kernels against their torch references, and the references against a
naive dense attention.

Without a GPU the Triton kernels run under the interpreter on CPU tensors; with one, the same
tests run the compiled kernels on CUDA tensors.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest
import torch

# The interpreter must be chosen before triton is first imported (`import agentix_kernels` does not
# import it). If something imported triton earlier without it, the Triton tests cannot run here.
TRITON_TOO_EARLY = (not torch.cuda.is_available() and "triton" in sys.modules
                    and os.environ.get("TRITON_INTERPRET") != "1")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Compare in fp32 with the tolerance of `actual`'s dtype."""
    tol = TOLERANCE[actual.dtype]
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)


STALE = 1000.0  # what cache slots outside every context hold


@dataclass(frozen=True)
class PagedKV:
    """One layer's K/V stored in a block-major paged cache, plus the same K/V dense.

    kv_cache: [num_blocks, num_layers, 2, block_size, kv_heads, head_dim]; k_cache/v_cache are
    the non-contiguous views of `layer`. Every slot outside the sequences' contexts (block 0, the
    tail of each last block, unused blocks, other layers) holds a large finite value (the
    decode reference reads whole blocks and masks, so slots must be finite), so any unmasked
    read of it shows.
    dense_k[i]/dense_v[i]: [context_lens[i], kv_heads, head_dim] contiguous copies.
    """

    kv_cache: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor
    dense_k: list[torch.Tensor]
    dense_v: list[torch.Tensor]


def make_paged_kv(context_lens: list[int], *, block_size: int, num_kv_heads: int, head_dim: int,
                  dtype: torch.dtype, seed: int = 0, num_layers: int = 2, layer: int = 1,
                  spare_blocks: int = 3) -> PagedKV:
    """Build a paged cache holding random K/V for each context, in shuffled non-contiguous
    blocks (block 0 reserved as the null block, tables padded with 0)."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in context_lens]
    num_blocks = 1 + sum(blocks_per_seq) + spare_blocks
    kv_cache = torch.full((num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim),
                          STALE, dtype=dtype)
    ids = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    tables = torch.zeros(len(context_lens), max(max(blocks_per_seq, default=0), 1),
                         dtype=torch.int32)
    dense_k, dense_v = [], []
    for i, n in enumerate(context_lens):
        seq_blocks = [ids.pop() for _ in range(blocks_per_seq[i])]
        tables[i, : len(seq_blocks)] = torch.tensor(seq_blocks, dtype=torch.int32)
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        for pos in range(n):
            kv_cache[seq_blocks[pos // block_size], layer, 0, pos % block_size] = k[pos]
            kv_cache[seq_blocks[pos // block_size], layer, 1, pos % block_size] = v[pos]
        dense_k.append(k.to(DEVICE))
        dense_v.append(v.to(DEVICE))
    kv_cache = kv_cache.to(DEVICE)
    return PagedKV(kv_cache, kv_cache[:, layer, 0], kv_cache[:, layer, 1], tables.to(DEVICE),
                   torch.tensor(context_lens, dtype=torch.int32, device=DEVICE), dense_k, dense_v)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float, window: int = 0) -> torch.Tensor:
    """Dense causal attention of one sequence's last q.shape[0] positions, head by head in fp64
    (with `window` > 0, position p sees keys p - window < k <= p only).

    q: [q_len, q_heads, d]; k, v: [ctx, kv_heads, d] contiguous (ctx >= q_len). Returns fp64.
    """
    q_len, num_q_heads, _ = q.shape
    ctx, num_kv_heads, _ = k.shape
    group = num_q_heads // num_kv_heads
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for h in range(num_q_heads):
        kh, vh = k[:, h // group].double(), v[:, h // group].double()
        for j in range(q_len):
            visible = ctx - q_len + j + 1  # keys at positions 0..p
            lo = max(0, visible - window) if window else 0
            scores = (kh[lo:visible] @ q[j, h].double()) * scale
            out[j, h] = torch.softmax(scores, dim=0) @ vh[lo:visible]
    return out


@pytest.fixture(autouse=True)
def _triton_mode_is_usable():
    if TRITON_TOO_EARLY:
        pytest.fail("triton was imported before tests/kernels/conftest.py set TRITON_INTERPRET=1; "
                    "set it earlier (e.g. in tests/conftest.py) on machines without CUDA")


# Helpers reach the tests as fixtures (importing a conftest module by name is ambiguous).
@pytest.fixture
def device() -> torch.device:
    return DEVICE


@pytest.fixture(name="assert_close")
def _assert_close_fixture():
    return assert_close


@pytest.fixture(name="make_paged_kv")
def _make_paged_kv_fixture():
    return make_paged_kv


@pytest.fixture(name="naive_attention")
def _naive_attention_fixture():
    return naive_attention
