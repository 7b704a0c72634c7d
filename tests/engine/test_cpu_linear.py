"""The CPU linear (`engine.models.cpu_linear`): oneDNN over a packed weight equals `F.linear`
within float32 rounding, replaces every float32 CPU linear (tensor-parallel shards included)
and leaves everything else (other dtypes, other devices, a torch without oneDNN) as it was.
Exact greedy parity with transformers is the parity tests' (test_parity.py and others)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from engine import LLM
from engine.models.cpu_linear import PackedLinear, can_pack, pack_linears
from engine.parallel.comm import Communicator, listen_store
from engine.parallel.layers import ParallelLMHead, RowParallelLinear, shard_model
from engine.parallel.layout import ShardLayout

pytestmark = pytest.mark.skipif(not can_pack(torch.zeros(1)),
                                reason="this torch has no usable oneDNN")


def _linear(in_features: int, out_features: int, bias: bool) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(in_features, out_features, bias=bias)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [0, 1, 7, 64])
def test_packed_linear_equals_f_linear_within_rounding(rows, bias):
    linear = _linear(576, 1536, bias)
    x = torch.randn(rows, 576)
    expected = F.linear(x, linear.weight, linear.bias)
    with torch.inference_mode():
        got = PackedLinear(linear)(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)


def test_packed_linear_takes_leading_dims_and_strided_input():
    linear = _linear(64, 32, bias=True)
    packed = PackedLinear(linear)
    x = torch.randn(3, 5, 128)[..., ::2]
    torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


def test_packed_rows_do_not_depend_on_the_batch():
    packed = PackedLinear(_linear(576, 576, bias=False))
    x = torch.randn(64, 576)
    whole = packed(x)
    assert all(torch.equal(packed(x[:n]), whole[:n]) for n in (1, 5, 33))


def test_packed_linear_refuses_other_dtypes():
    with pytest.raises(ValueError, match=r"needs a float32 \(or.*got torch.float16 on cpu"):
        PackedLinear(_linear(8, 8, bias=False).to(torch.float16))


@pytest.mark.skipif(not can_pack(torch.zeros(1, dtype=torch.bfloat16)),
                    reason="oneDNN has no bf16 kernels for this CPU")
@pytest.mark.parametrize("rows", [1, 64])
def test_bf16_packed_linear_equals_f_linear(rows):
    linear = _linear(576, 1536, bias=False).to(torch.bfloat16)
    x = torch.randn(rows, 576).to(torch.bfloat16)
    expected = F.linear(x, linear.weight)
    with torch.inference_mode():
        got = PackedLinear(linear)(x)
    assert got.dtype == torch.bfloat16
    # Both are oneDNN bf16 products accumulated in float32; within one bf16 rounding.
    torch.testing.assert_close(got, expected, rtol=8e-3, atol=1e-3)


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8, bias=False))
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight


def test_pack_linears_replaces_every_linear_and_keeps_tied_weights():
    model = _Tied()
    x = torch.randn(4, 8)
    before = model.head(model.body(x))
    assert pack_linears(model) == 3
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert isinstance(model.embed.weight, nn.Parameter)   # the head's packed copy is its own
    torch.testing.assert_close(model.head(model.body(x)), before, rtol=1e-5, atol=1e-5)
    assert pack_linears(model) == 0


@pytest.mark.parametrize("model", [
    pytest.param(lambda: _Tied().to(torch.float16), id="fp16"),
    pytest.param(lambda: _Tied().to("meta"), id="not-cpu"),
])
def test_pack_linears_leaves_other_dtypes_and_devices_alone(model):
    model = model()
    assert pack_linears(model) == 0
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == 3


def test_pack_linears_leaves_bf16_alone_without_onednn_bf16_kernels(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert pack_linears(_Tied().to(torch.bfloat16)) == 0


def test_pack_linears_falls_back_without_onednn(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    model = _Tied()
    assert not can_pack(model.head.weight)
    assert pack_linears(model) == 0


def test_the_engine_runs_packed_linears_on_cpu(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=16)
    modules = list(llm.engine.runner.model.modules())
    assert not any(isinstance(m, nn.Linear) for m in modules)
    layers = llm.engine.runner.model.args.num_layers
    assert sum(isinstance(m, PackedLinear) for m in modules) == 7 * layers + 1


def test_tensor_parallel_shards_are_packed(tiny_llama_dir):
    """One rank of a world of one: its row-parallel layers and vocab-parallel head hold
    packed linears, and the sharded, packed model computes what the whole one does."""
    from engine.loader import load_model, read_model_dir

    files = read_model_dir(tiny_llama_dir)
    whole = load_model(files, 64, torch.float32, torch.device("cpu"))
    model = load_model(files, 64, torch.float32, torch.device("cpu"))
    store = listen_store("127.0.0.1", 1)
    shard_model(model, ShardLayout(files.args, 0, 1), Communicator(store, 0, 1,
                                                                   torch.device("cpu")))
    pack_linears(model)
    parallel = [m for m in model.modules() if isinstance(m, (RowParallelLinear, ParallelLMHead))]
    assert parallel and all(isinstance(m.linear, PackedLinear) for m in parallel)
    hidden = torch.randn(3, files.args.hidden_size)
    torch.testing.assert_close(model.logits(hidden), whole.logits(hidden), rtol=1e-5,
                               atol=1e-4)
