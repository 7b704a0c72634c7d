"""The native greedy screen (`agentix_kernels.native.greedy_screen`) through `GreedyScreen`:
the fp32 argmax exactly, even where the bf16 logits alone pick another id."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agentix_kernels.native.build import native_library
from agentix_kernels.native.greedy_screen import greedy_screen
from engine.models.greedy_screen import TINY, GreedyScreen

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def head_of(weight: torch.Tensor) -> nn.Linear:
    head = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    head.weight.data.copy_(weight)
    return head


def close_rows(vocab: int, dim: int, seed: int) -> torch.Tensor:
    """Head rows that differ by about 1e-3 of their size: their logits are closer than bf16
    resolves, so the bf16 argmax is often not the fp32 one."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(dim, generator=generator)
    return base + 1e-3 * torch.randn(vocab, dim, generator=generator)


@pytest.mark.parametrize("vocab,dim", [(1000, 48), (64, 16), (130, 200)])
def test_tokens_are_the_fp32_argmax_where_bf16_alone_errs(vocab, dim):
    assert native_library() is not None
    weight = close_rows(vocab, dim, seed=vocab)
    hidden = 4 * torch.randn(40, dim, generator=torch.Generator().manual_seed(1))
    exact = (hidden.double() @ weight.double().T).argmax(1)
    bf16 = (hidden.bfloat16() @ weight.bfloat16().T).float().argmax(1)
    assert (bf16 != exact).any()  # the screen has something to correct
    assert GreedyScreen(head_of(weight)).tokens(hidden) == exact.tolist()


def test_a_tie_goes_to_the_lowest_id():
    weight = torch.randn(300, 32, generator=torch.Generator().manual_seed(2))
    weight[7] = weight[250] = 5 * torch.ones(32)  # the same best row twice
    hidden = torch.ones(3, 32)
    assert GreedyScreen(head_of(weight)).tokens(hidden) == [7, 7, 7]


def test_no_rows_give_no_tokens():
    assert GreedyScreen(head_of(torch.randn(70, 8))).tokens(torch.empty(0, 8)) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e35])
def test_values_out_of_the_bounds_range_give_none(bad):
    screen = GreedyScreen(head_of(torch.randn(100, 16)))
    hidden = torch.randn(4, 16)
    hidden[2, 5] = bad
    assert screen.tokens(hidden) is None
    assert screen.tokens(hidden[:2]) is not None  # rows without the bad value screen fine


def test_the_entry_point_names_bad_tensors():
    hidden, weight = torch.randn(2, 8), torch.randn(50, 8)
    scores = torch.zeros(2, 50, dtype=torch.bfloat16)
    norms = weight.norm(dim=1)
    with pytest.raises(ValueError, match="scores \\[rows, vocab\\] bfloat16"):
        greedy_screen(hidden, scores.float(), weight, norms, 0.01, 0.004, TINY)
    with pytest.raises(ValueError, match="col_norms \\[vocab\\]"):
        greedy_screen(hidden, scores, weight, norms[:10], 0.01, 0.004, TINY)
    with pytest.raises(ValueError, match="weight \\[vocab, dim\\]"):
        greedy_screen(hidden, scores, weight.T.contiguous().T, norms, 0.01, 0.004, TINY)


def test_a_screen_refuses_a_head_with_a_bias():
    with pytest.raises(ValueError, match="bias-free float32 CPU linear"):
        GreedyScreen(nn.Linear(8, 20))
