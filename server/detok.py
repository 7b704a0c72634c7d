"""Incremental detokenization for streamed text.

Each push hands the new token ids to an `IncrementalDetokenizer` (which decodes only a short
window of recent tokens, never the whole output) and hands out only what is new and settled: a
trailing U+FFFD (an incomplete UTF-8 sequence) is held back until a later token resolves it,
and so is a tail that could be the start of a stop string (the engine cuts stop strings off
the final text, so the streamed text never shows what the final text will not contain). The
work per push is bounded by the window and the stop strings' lengths, not by the output's.
"""

from __future__ import annotations

from typing import Callable, Sequence

from engine.detokenizer import REPLACEMENT, IncrementalDetokenizer, StopPrefixTracker

__all__ = ["REPLACEMENT", "IncrementalText", "stop_prefix_len"]


def stop_prefix_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of one of `stops`."""
    return StopPrefixTracker(stops).push(text)


class IncrementalText:
    """The text of one call's output, released piece by piece.

    `decode` maps token ids to text, as `Tokenizer.decode` (None: a token-id-only model, whose
    text is always empty). Not thread-safe: one owner (the engine thread) pushes.
    """

    def __init__(self, decode: Callable[[list[int]], str] | None,
                 stops: Sequence[str] = ()) -> None:
        self._detokenizer = IncrementalDetokenizer(decode) if decode is not None else None
        self._stops = StopPrefixTracker(stops) if stops else None
        self._held = ""        # settled text not released: it may start a stop string
        self._stopped = False  # a whole stop string appeared: the engine cuts there
        self._sent: list[str] = []
        self._num_sent = 0

    @property
    def sent(self) -> str:
        """All text released so far."""
        if len(self._sent) > 1:
            self._sent = ["".join(self._sent)]
        return self._sent[0] if self._sent else ""

    def push(self, token_ids: Sequence[int]) -> str:
        """Add new token ids; return the newly settled text (possibly empty)."""
        if self._detokenizer is None:
            return ""
        new = self._detokenizer.push(token_ids)
        if not new or self._stopped:
            return ""
        if self._stops is None:
            return self._send(new)
        held = self._held + new
        hold = self._stops.push(new)
        if self._stops.match is not None:
            # Only reached if the engine missed it; release nothing from the match on.
            self._stopped = True
            hold = len(held) - max(0, self._stops.match - self._num_sent)
        self._held = held[len(held) - hold:] if hold else ""
        return self._send(held[:len(held) - hold])

    def finish(self, final_text: str) -> str:
        """The rest of the call's final text (stop string cut off) after what was sent."""
        if len(final_text) <= self._num_sent or not final_text.startswith(self.sent):
            # Nothing new, or a tokenizer changed earlier text: never take back what was sent.
            return ""
        return self._send(final_text[self._num_sent:])

    def _send(self, new: str) -> str:
        if new:
            self._sent.append(new)
            self._num_sent += len(new)
        return new
