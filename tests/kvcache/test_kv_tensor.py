"""KV tensor spec, allocation and per-layer views."""

import pytest
import torch

from kvcache.kv_tensor import KVCacheSpec, allocate_kv_cache, layer_kv


def make_spec(**overrides) -> KVCacheSpec:
    fields = dict(num_blocks=5, num_layers=3, block_size=4, num_kv_heads=2, head_dim=8,
                  dtype=torch.float16)
    return KVCacheSpec(**{**fields, **overrides})


def test_spec_shape_and_bytes():
    spec = make_spec()
    assert spec.block_shape == (3, 2, 4, 2, 8)
    assert spec.bytes_per_block == 3 * 2 * 4 * 2 * 8 * 2


def test_allocate_gives_a_zeroed_block_major_tensor():
    spec = make_spec()
    kv = allocate_kv_cache(spec, "cpu")
    assert (kv.shape, kv.dtype) == ((5, 3, 2, 4, 2, 8), torch.float16)
    assert not kv.any()
    assert kv[0].numel() * kv.element_size() == spec.bytes_per_block


def test_layer_views_write_through_to_their_slice():
    kv = allocate_kv_cache(make_spec(dtype=torch.float32), "cpu")
    k, v = layer_kv(kv, 1)
    assert k.shape == v.shape == (5, 4, 2, 8)
    k[2, 3] = 1.0
    v[4, 0] = 2.0
    assert kv[2, 1, 0, 3].eq(1.0).all() and kv[4, 1, 1, 0].eq(2.0).all()
    assert kv.sum() == 1.0 * 16 + 2.0 * 16
    with pytest.raises(ValueError, match="layer"):
        layer_kv(kv, 3)


@pytest.mark.parametrize(
    "field, value",
    [("num_blocks", 0), ("num_layers", -1), ("block_size", 0), ("num_kv_heads", 0),
     ("head_dim", 0), ("dtype", "float16")],
)
def test_bad_spec_raises_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        make_spec(**{field: value})
