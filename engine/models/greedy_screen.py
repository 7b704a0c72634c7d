"""Greedy tokens without the full fp32 LM head: a bf16 screen, then fp32 on its few candidates.

On a CPU with native bf16 dot products (AVX512-BF16 or AMX), oneDNN's bf16 product of the
LM head runs in about half the time of the fp32 one (SmolLM2's head, 64 rows: 9.4 against
17.9 ms on a Zen 4). A row that samples greedily needs only the argmax of its logits, and a
bound on the screen's error says which ids can hold it.

The bound. Let A_j be oneDNN's bf16 logit of hidden row h and head row W_j: h and W rounded
to bf16 (relative error at most u = 2^-8 each), their products summed in fp32 (exact in
fp32, then each addition rounded: at most gamma_n = n e / (1 - n e) of the sum of the
products' magnitudes over the n = dim terms, e = 2^-24, in any order) and the sum rounded
to bf16 (at most u / (1 - u) of |A_j|). The engine's fp32 logit L_j (any summation order)
is within gamma_n of the same magnitudes of the exact h . W_j. With
sum_i |h_i||W_ij| <= |h||W_j| (Cauchy-Schwarz):

    |A_j - L_j| <= (2u + u^2 + gamma_n ((1 + u)^2 + 1)) |h||W_j| + u / (1 - u) |A_j| = b_j

So for lo = max_k (A_k - b_k): every L_j with A_j + b_j < lo is below L_k for the k that
gives lo, and the argmax of L is among the candidates {j : A_j + b_j >= lo}. Those are
computed in fp32 and the largest wins (the lowest id on ties, as `torch.argmax`). The two
coefficients carry 5% to spare, for the rounding of the norms and of the bound's own
arithmetic, and `TINY` is added for subnormals flushed to zero. On SmolLM2's greedy outputs
a row has 3.8 candidates on average (66 at most) out of 49,152.

It holds the head's fp32 weight (shared with the embedding when tied, as SmolLM2's is; an
untied head's is kept beside its packed copy) and a bf16 copy packed for oneDNN (half the
fp32 size).
"""

from __future__ import annotations

import torch
from torch import nn

from agentix_kernels.native.build import native_library
from agentix_kernels.native.greedy_screen import greedy_screen
from engine.models.cpu_linear import can_pack
from engine.models.layers import CausalLM

_U = 2.0 ** -8  # bf16's unit roundoff
TINY = 1e-30


def _coefficients(dim: int) -> tuple[float, float]:
    """The bound's coefficients of |h||W_j| and of |A_j| for rows of `dim` terms, with 5% to
    spare."""
    n_e = dim * 2.0 ** -24
    gamma = n_e / (1 - n_e)
    scale = 2 * _U + _U ** 2 + gamma * ((1 + _U) ** 2 + 1)
    return 1.05 * scale, 1.05 * _U / (1 - _U)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX tiles); without, oneDNN
    emulates bf16 and the screen would be slower than the fp32 head."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def screenable(head: nn.Module) -> bool:
    """Whether `head` is a linear a screen can take: bias-free, float32 on the CPU, with
    torch's oneDNN ops (`can_pack`)."""
    return (isinstance(head, nn.Linear) and head.bias is None
            and head.weight.dtype == torch.float32 and can_pack(head.weight))


class GreedyScreen:
    """The greedy tokens of hidden rows through `head` (a bias-free fp32 CPU linear), as
    `head(hidden).argmax(-1)` up to fp32 rounding of near ties (module docstring)."""

    def __init__(self, head: nn.Linear) -> None:
        if not screenable(head):
            raise ValueError("GreedyScreen: needs a bias-free float32 CPU linear and torch's "
                             "oneDNN ops")
        weight = head.weight.detach()
        self.weight = weight if weight.stride(1) == 1 else weight.contiguous()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.to(torch.bfloat16))
        self.col_norms = weight.norm(dim=1).contiguous()
        self.scale, self.rel = _coefficients(weight.shape[1])

    def tokens(self, hidden: torch.Tensor) -> list[int] | None:
        """Each row's greedy token, or None when a value is outside the screen's range (then
        the caller computes the full logits)."""
        if hidden.shape[0] == 0:
            return []
        scores = torch.ops.mkldnn._linear_pointwise(hidden.to(torch.bfloat16), self.packed,
                                                    None, "none", [], "")
        tokens = greedy_screen(hidden, scores, self.weight, self.col_norms, self.scale,
                               self.rel, TINY)
        return None if tokens is None else tokens.tolist()


def make_greedy_screen(model: CausalLM) -> GreedyScreen | None:
    """A screen of `model`'s head when it pays and is exact: a CPU with native bf16, the
    native library, a bias-free float32 head and the shared `CausalLM.logits` (a family that
    changes its logits, e.g. by scaling them, gets none). Call it before `pack_linears`,
    which drops the head's weight."""
    head = model.lm_head
    if (type(model).logits is not CausalLM.logits or not screenable(head)
            or not cpu_has_native_bf16() or native_library() is None):
        return None
    return GreedyScreen(head)
