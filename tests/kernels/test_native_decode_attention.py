"""The native CPU decode attention against dense fp64 attention and the torch reference; its
build (cached, on torch's OpenMP runtime) and its fallbacks."""

from __future__ import annotations

import ctypes
import warnings
from pathlib import Path

import pytest
import torch

import agentix_kernels as kernels
from agentix_kernels import decode_attention
from agentix_kernels.native import build
from agentix_kernels.native import decode_attention as native

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="CPU kernel; the CUDA machine runs the Triton kernel")


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """`native_library()` forgotten before and after, its cache in `tmp_path`."""
    monkeypatch.setenv("AGENTIX_CACHE", str(tmp_path))
    build.native_library.cache_clear()
    yield tmp_path
    build.native_library.cache_clear()


def _forbid(*_args, **_kwargs):
    raise AssertionError("the torch reference ran where the native kernel should have")


def test_the_library_builds_on_this_machine():
    # CI's machine has a C compiler; without one every other test here would test nothing.
    assert build.native_library() is not None


@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim,block_size,window", [
    (9, 3, 64, 16, 0),    # SmolLM2's shape
    (8, 2, 128, 16, 0),   # the other constant-length head size
    (4, 4, 80, 8, 0),     # a head size of run-time length, no GQA
    (6, 1, 16, 1, 0),     # one kv head, one-slot blocks
    (12, 4, 64, 32, 5),   # a window inside the last block
    (4, 2, 32, 4, 11),    # a window over several blocks
    (4, 2, 32, 4, 500),   # a window longer than every context
])
def test_matches_dense_attention(num_q_heads, num_kv_heads, head_dim, block_size, window,
                                 monkeypatch, make_paged_kv, naive_attention, assert_close):
    monkeypatch.setattr(decode_attention, "paged_decode_attention_ref", _forbid)
    lens = [1, 37, 0, block_size * 3, 64, 5]
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=num_kv_heads,
                       head_dim=head_dim, dtype=torch.float32)
    q = torch.randn(len(lens), num_q_heads, head_dim, generator=torch.Generator().manual_seed(1))
    scale = head_dim ** -0.5
    out = kernels.paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables,
                                         kv.context_lens, scale, window=window)
    assert out.shape == q.shape and out.dtype == torch.float32
    for i, n in enumerate(lens):
        if n == 0:
            assert torch.equal(out[i], torch.zeros_like(out[i]))
            continue
        expected = naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i], scale, window)[0]
        assert_close(out[i], expected.float())


def test_agrees_with_the_reference_on_a_decode_batch(make_paged_kv):
    gen = torch.Generator().manual_seed(2)
    lens = torch.randint(1, 300, (24,), generator=gen).tolist()
    kv = make_paged_kv(lens, block_size=16, num_kv_heads=3, head_dim=64, dtype=torch.float32)
    q = torch.randn(len(lens), 9, 64, generator=gen)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    assert native.supports(*args[:5])
    torch.testing.assert_close(kernels.paged_decode_attention(*args),
                               decode_attention.paged_decode_attention_ref(*args),
                               atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim,block_size,window", [
    (9, 3, 64, 16, 0),    # SmolLM2's shape
    (4, 4, 80, 8, 0),     # a head size of run-time length
    (4, 2, 32, 4, 11),    # a window over several blocks
])
def test_a_bf16_cache_is_read_natively_in_float32(num_q_heads, num_kv_heads, head_dim,
                                                  block_size, window, monkeypatch,
                                                  make_paged_kv, naive_attention, assert_close):
    monkeypatch.setattr(decode_attention, "paged_decode_attention_ref", _forbid)
    lens = [1, 37, 0, block_size * 3, 64]
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=num_kv_heads,
                       head_dim=head_dim, dtype=torch.bfloat16)
    q = torch.randn(len(lens), num_q_heads, head_dim,
                    generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    scale = head_dim ** -0.5
    out = kernels.paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables,
                                         kv.context_lens, scale, window=window)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    # The same values widened to float32 take the float32 loops: the bf16 result is that one
    # rounded once.
    wide = kernels.paged_decode_attention(q.float(), kv.k_cache.float(), kv.v_cache.float(),
                                          kv.block_tables, kv.context_lens, scale,
                                          window=window)
    assert torch.equal(out, wide.to(torch.bfloat16))
    for i, n in enumerate(lens):
        if n == 0:
            assert torch.equal(out[i], torch.zeros_like(out[i]))
            continue
        expected = naive_attention(q[i:i + 1], kv.dense_k[i], kv.dense_v[i], scale, window)[0]
        assert_close(out[i], expected.to(torch.bfloat16))


def test_other_tensors_go_to_the_reference(monkeypatch, make_paged_kv):
    kv = make_paged_kv([5, 20], block_size=8, num_kv_heads=2, head_dim=16, dtype=torch.float16)
    q16 = torch.randn(2, 4, 16).half()
    args = (kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens)
    assert not native.supports(q16, *args)
    out = kernels.paged_decode_attention(q16, *args, 0.25)
    assert torch.equal(out, decode_attention.paged_decode_attention_ref(q16, *args, 0.25))
    # float32, but K and V laid out differently: the reference too.
    k = kv.k_cache.float()
    v = kv.v_cache.float().contiguous().transpose(1, 2).contiguous().transpose(1, 2)
    assert k.stride() != v.stride()
    assert not native.supports(q16.float(), k, v, kv.block_tables, kv.context_lens)


def test_bad_shapes_are_refused_before_the_kernel(make_paged_kv):
    kv = make_paged_kv([5], block_size=8, num_kv_heads=2, head_dim=16, dtype=torch.float32)
    with pytest.raises(ValueError, match="not a multiple of num_kv_heads"):
        kernels.paged_decode_attention(torch.randn(1, 3, 16), kv.k_cache, kv.v_cache,
                                       kv.block_tables, kv.context_lens, 0.25)
    with pytest.raises(ValueError, match=r"context_lens must be \[1\]"):
        kernels.paged_decode_attention(torch.randn(1, 4, 16), kv.k_cache, kv.v_cache,
                                       kv.block_tables, kv.context_lens.repeat(2), 0.25)


def test_the_build_is_cached_and_uses_torchs_openmp_runtime(fresh_build):
    import sentencepiece  # noqa: F401  (maps a second libgomp of its own, as it does in a server)

    assert build.native_library() is not None
    built = list((fresh_build / "kernels").glob("kernels_cpu-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    build.native_library.cache_clear()
    library = build.native_library()
    assert library is not None
    assert built[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
    # The library's OpenMP entry points are torch's, not the other copy's: one team per thread.
    torch_cpu = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    assert (_address(library.omp_get_max_threads)
            == _address(torch_cpu.omp_get_max_threads))


def _address(function) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


def test_no_compiler_warns_once_and_falls_back(fresh_build, monkeypatch, make_paged_kv):
    monkeypatch.setenv("CC", str(fresh_build / "no-such-compiler"))
    with pytest.warns(RuntimeWarning, match="native CPU kernels unavailable"):
        assert build.native_library() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build.native_library() is None  # remembered: no second warning
    kv = make_paged_kv([5], block_size=8, num_kv_heads=2, head_dim=16, dtype=torch.float32)
    args = (torch.randn(1, 4, 16), kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens)
    assert not native.supports(*args)
    assert torch.equal(kernels.paged_decode_attention(*args, 0.25),
                       decode_attention.paged_decode_attention_ref(*args, 0.25))


def test_a_failed_build_names_the_compiler_error(fresh_build, monkeypatch):
    monkeypatch.setattr(build, "CFLAGS", (*build.CFLAGS, "-no-such-flag"))
    with pytest.warns(RuntimeWarning, match="no-such-flag"):
        assert build.native_library() is None
    assert not list((fresh_build / "kernels").glob("*.so"))  # nothing half-written is kept


def test_turned_off_by_the_environment(fresh_build, monkeypatch):
    monkeypatch.setenv("AGENTIX_NATIVE_CPU", "0")
    assert build.native_library() is None


@pytest.mark.parametrize("table_entry,length", [
    pytest.param(99, 5, id="block id past the cache"),
    pytest.param(-3, 5, id="negative block id"),
    pytest.param(1, 17, id="context longer than its table row"),
    pytest.param(1, -1, id="negative context"),
])
def test_tables_that_do_not_fit_the_cache_are_refused(table_entry, length, make_paged_kv):
    kv = make_paged_kv([5, 9], block_size=8, num_kv_heads=2, head_dim=16, dtype=torch.float32)
    tables, lens = kv.block_tables.clone(), kv.context_lens.clone()
    tables[1, 0], lens[1] = table_entry, length
    q = torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match="do not fit the cache"):
        native.paged_decode_attention(q, kv.k_cache, kv.v_cache, tables, lens, 0.25, 2)


def test_blocks_before_the_window_are_never_read_nor_checked(make_paged_kv, naive_attention,
                                                            assert_close):
    kv = make_paged_kv([30], block_size=8, num_kv_heads=2, head_dim=16, dtype=torch.float32)
    tables = kv.block_tables.clone()
    tables[0, 0] = 10**6  # a block wholly before the 6-key window: not a cache block
    q = torch.randn(1, 4, 16)
    out = native.paged_decode_attention(q, kv.k_cache, kv.v_cache, tables, kv.context_lens,
                                        0.25, 2, window=6)
    assert_close(out[0], naive_attention(q, kv.dense_k[0], kv.dense_v[0], 0.25, 6)[0].float())
