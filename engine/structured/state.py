"""One constrained call's place in its output grammar."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import torch

log = logging.getLogger(__name__)


class GrammarState:
    """A call's matcher (llguidance `LLMatcher`): `advance` it with every token the call
    appends, in order; it says which tokens may come next (`engine.structured.masks`).
    Complete once nothing but the end may follow (or the end was taken): the call stops.

    Should the library fail on it (raise, or panic: pyo3 raises a Rust panic as
    PanicException, a BaseException), the state is `failed` from then on, and that is this
    call's alone: its mask allows every token and `advance` refuses every token, so the call
    ends with an error at the token being decided while its batch goes on. KeyboardInterrupt
    and SystemExit pass through."""

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher
        self.failed = False
        self.is_complete = False  # the tokens taken so far complete the grammar

    def advance(self, token: int) -> bool:
        """Take the call's next token and update `is_complete`; False if the grammar forbids
        it (the mask did not: a fault) or the state has failed, and the state is then
        unusable."""
        with self._failing_on_error():
            if not self.failed and self.matcher.consume_token(token):
                self.is_complete = bool(self.matcher.is_stopped())
                return True
        return False

    def fill_mask(self, words: torch.Tensor) -> None:
        """Write which tokens may come next into `words` (a contiguous CPU int32 row of
        ceil(V / 32) words; bit k of word w: token 32w + k allowed): every token once the
        state has failed. Releases the GIL."""
        with self._failing_on_error():
            if not self.failed:
                self.matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)
                return
        words.fill_(-1)

    @contextlib.contextmanager
    def _failing_on_error(self) -> Iterator[None]:
        """Around a call into the library: whatever it raises, panics included, is logged
        and swallowed, and the state has failed (but KeyboardInterrupt and SystemExit)."""
        try:
            yield
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            log.exception("the grammar library failed on a call's output grammar; the call "
                          "ends with an error")
            self.failed = True
