"""Incremental detokenization for streamed text.

Each push decodes the whole output so far and hands out only what is new and settled: a
trailing U+FFFD (an incomplete UTF-8 sequence) is held back until the next token resolves it,
and so is a tail that could be the start of a stop string (the engine cuts stop strings off
the final text, so the streamed text never shows what the final text will not contain).
"""

from __future__ import annotations

from typing import Callable, Sequence

REPLACEMENT = "\ufffd"


def stop_prefix_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of one of `stops`."""
    longest = 0
    for stop in stops:
        start = max(0, len(text) - len(stop) + 1)  # only tails shorter than the stop string
        while (start := text.find(stop[0], start)) != -1 and len(text) - start > longest:
            if stop.startswith(text[start:]):
                longest = len(text) - start
                break
            start += 1
    return longest


class IncrementalText:
    """The text of one call's output, released piece by piece.

    `decode` maps all output token ids so far to text (None: a token-id-only model, whose
    text is always empty). Not thread-safe: one owner (the engine thread) pushes.
    """

    def __init__(self, decode: Callable[[list[int]], str] | None,
                 stops: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stops = tuple(stops)
        self._token_ids: list[int] = []
        self.sent = ""

    def push(self, token_ids: Sequence[int]) -> str:
        """Add new token ids; return the newly settled text (possibly empty)."""
        self._token_ids.extend(token_ids)
        if self._decode is None or not token_ids:
            return ""
        text = self._decode(self._token_ids)
        end = len(text)
        while end > 0 and text[end - 1] == REPLACEMENT:
            end -= 1
        end -= stop_prefix_len(text[:end], self._stops)
        return self._release(text[:end])

    def finish(self, final_text: str) -> str:
        """The rest of the call's final text (stop string cut off) after what was sent."""
        return self._release(final_text)

    def _release(self, settled: str) -> str:
        if len(settled) <= len(self.sent) or not settled.startswith(self.sent):
            # Nothing new, or a tokenizer changed earlier text: never take back what was sent.
            return ""
        new, self.sent = settled[len(self.sent):], settled
        return new
