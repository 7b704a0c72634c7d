"""How a linear layer runs on the CPU: oneDNN over a weight reordered once at load.

`F.linear` on the CPU is MKL's sgemm, which re-lays the weight out on every call. oneDNN's
inner product over a weight already in its blocked layout (`torch.ops.mkldnn`, the ops
inductor emits for CPU linears) runs every shape of a SmolLM2 step faster on this project's
AMD EPYC VMs: 1.3-1.6x at 64 rows, 1.8x for the 49,152-row LM head, and at 1 to 1,024 rows
alike, whatever batch size the reorder is told (bench/notes/2026-12-04-agentix-vs-vllm.md).
Its float32 results are not bit-equal to `F.linear` (about 1e-4 apart at these sizes);
unlike MKL's they do not depend on how many rows a call has. bfloat16 weights, where the CPU
runs oneDNN's bf16 kernels, pack too: `F.linear` already runs those in oneDNN, and packing
saves the reorder of every call (1.2-1.4x at 64 rows; the same values on SmolLM2's shapes).

`pack_linears(model)` swaps every `nn.Linear` of a model for a `PackedLinear` when
`can_pack` says its weight can go through oneDNN (float32, or bfloat16 on a CPU with bf16
support, on the CPU, a torch built with mkldnn); any other model (CUDA, float16, no mkldnn)
is left exactly as it was.
"""

from __future__ import annotations

import torch
from torch import nn


def can_pack(weight: torch.Tensor) -> bool:
    """Whether `weight` can run as a `PackedLinear`: on the CPU, with torch's oneDNN ops
    present and usable, float32, or bfloat16 where oneDNN has bf16 kernels for this CPU."""
    if not (weight.device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    return weight.dtype == torch.float32 or (
        weight.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class PackedLinear(nn.Module):
    """`linear`'s `y = x W^T + b` through oneDNN, its weight reordered once into oneDNN's
    layout (a buffer outside the state dict, as large as the weight). Holds no reference to
    `linear`'s weight, so an untied weight is freed with `linear`; its bias is shared."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if not can_pack(linear.weight):
            raise ValueError(f"PackedLinear: needs a float32 (or, with oneDNN bf16 kernels, "
                             f"bfloat16) CPU weight and torch's oneDNN ops, got "
                             f"{linear.weight.dtype} on {linear.weight.device}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer(
            "packed", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach()),
            persistent=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def pack_linears(model: nn.Module) -> int:
    """Replace, in place, every `nn.Linear` inside `model` whose weight `can_pack` by a
    `PackedLinear`; returns how many were replaced. Call it once the weights are final (after
    loading and tensor-parallel sharding): a packed layer no longer has a `weight`."""
    swaps = [(parent, name, child) for parent in model.modules()
             for name, child in parent.named_children()
             if isinstance(child, nn.Linear) and can_pack(child.weight)]
    for parent, name, child in swaps:
        setattr(parent, name, PackedLinear(child))
    return len(swaps)
