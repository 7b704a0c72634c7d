"""One constrained call's place in its output grammar."""

from __future__ import annotations

from typing import Any

import torch


class GrammarState:
    """A call's matcher (llguidance `LLMatcher`): `advance` it with every token the call
    appends, in order; it says which tokens may come next (`engine.structured.masks`).
    Complete once nothing but the end may follow (or the end was taken): the call stops."""

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher

    def advance(self, token: int) -> bool:
        """Take the call's next token; False if the grammar forbids it (the mask did not:
        a fault), and the state is then unusable."""
        return bool(self.matcher.consume_token(token))

    def fill_mask(self, words: torch.Tensor) -> None:
        """Write which tokens may come next into `words` (a contiguous CPU int32 row of
        ceil(V / 32) words; bit k of word w: token 32w + k allowed). Releases the GIL."""
        self.matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)

    @property
    def is_complete(self) -> bool:
        return bool(self.matcher.is_stopped())
