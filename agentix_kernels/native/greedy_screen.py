"""The native CPU greedy screen: each row's greedy token from bf16 logits and a bound on their
error (the bound and its proof: `engine.models.greedy_screen`, the one caller).

`greedy_screen(...)` returns None, computing nothing, when the library is unavailable or a
value is outside what the bound's arithmetic takes (a non-finite or huge logit or hidden
row): the caller then computes the full logits.
"""

from __future__ import annotations

import torch

from agentix_kernels.native.build import native_library

_OK, _OUT_OF_RANGE = 0, 1  # SCREEN_OK, SCREEN_OUT_OF_RANGE in greedy_screen_cpu.c


def greedy_screen(hidden: torch.Tensor, scores: torch.Tensor, weight: torch.Tensor,
                  col_norms: torch.Tensor, scale: float, rel: float, tiny: float
                  ) -> torch.Tensor | None:
    """Token ids `[rows]` (int64): for each row of `hidden` `[rows, dim]` (float32), the
    largest fp32 logit `hidden[r] . weight[j]` over the ids j whose screened logit
    `scores[r, j]` (bfloat16 `[rows, vocab]`) is within
    `scale * |hidden[r]| * col_norms[j] + rel * |scores[r, j]| + tiny` of the best lower bound;
    the lowest id on ties. `weight` `[vocab, dim]` float32 with unit stride along dim,
    `col_norms` `[vocab]` float32. ValueError for tensors of other shapes or dtypes,
    MemoryError when the kernel cannot allocate its scratch."""
    rows, dim = hidden.shape
    vocab = weight.shape[0]
    if (hidden.dtype != torch.float32 or weight.dtype != torch.float32
            or col_norms.dtype != torch.float32 or scores.dtype != torch.bfloat16
            or scores.shape != (rows, vocab) or weight.shape != (vocab, dim)
            or col_norms.shape != (vocab,) or weight.stride(1) != 1
            or any(t.device.type != "cpu" for t in (hidden, scores, weight, col_norms))):
        raise ValueError(f"greedy_screen: wants CPU hidden [rows, dim] float32, scores "
                         f"[rows, vocab] bfloat16, weight [vocab, dim] float32 (unit stride "
                         f"along dim) and col_norms [vocab] float32; got {tuple(hidden.shape)} "
                         f"{hidden.dtype}, {tuple(scores.shape)} {scores.dtype}, "
                         f"{tuple(weight.shape)} {weight.dtype}, {tuple(col_norms.shape)} "
                         f"{col_norms.dtype}")
    library = native_library()
    if library is None:
        return None
    hidden, scores, col_norms = hidden.contiguous(), scores.contiguous(), col_norms.contiguous()
    tokens = torch.empty(rows, dtype=torch.int64)
    if rows == 0:
        return tokens
    status = library.greedy_screen_bf16(
        hidden.data_ptr(), scores.data_ptr(), weight.data_ptr(), weight.stride(0),
        col_norms.data_ptr(), rows, vocab, dim, scale, rel, tiny, torch.get_num_threads(),
        tokens.data_ptr())
    if status == _OUT_OF_RANGE:
        return None
    if status != _OK:
        raise MemoryError("native greedy_screen could not allocate its scratch")
    return tokens
