"""Incremental detokenization and stop-string scanning, at a cost per new token that does not
grow with the length of the output.

`IncrementalDetokenizer` turns a stream of token ids into a stream of text. Decoding a token on
its own is not enough (a byte-level token may hold half a UTF-8 character, and tokenizers such
as SentencePiece drop the leading space of the first token they decode), and decoding the
whole output again for every token costs O(n) per token. So it keeps a short window: the
tokens from `prefix_offset` on, where the first `read_offset` of them (the context: the tokens
settled last time) have already been turned into text. Each push decodes only that window;
what the window's text has beyond the context's text is the new text. When the window's text
ends in U+FFFD (a character not complete yet) its tokens stay pending, and only the text
before the trailing U+FFFD is handed out; once it ends in a complete character, the pending
tokens become the next context and everything before them is dropped. Two decodes of a few
tokens per settled token, whatever the output's length.

The text it hands out is append-only and, after every token, equals the full decode
(`decode(all_ids)`) less its trailing U+FFFDs, for tokenizers whose decode of a window starting
at a character boundary is the matching part of the full decode (byte-level BPE, SentencePiece,
word-level). Two bounded fallbacks keep the window small even on odd output: a window whose
text keeps ending in U+FFFD for MAX_PENDING_TOKENS tokens (invalid bytes that no later token
can complete) is settled as it is, U+FFFD included (only there may the handed-out text differ
from the full decode, by a replacement character; the engine's final text is the full decode
anyway); and tokens that settle with no text at all (special tokens, which decode to nothing)
are dropped from the window, so a long run of them does not widen it.

`StopStringMatcher` finds the first stop string in such a stream of text: each push searches
only the new text plus the previous (longest stop - 1) characters, since a stop string that was
not there before must end in the new text. `StopPrefixTracker` follows, for streaming, the
longest tail of the text that could still grow into a stop string (the text to hold back),
with one Knuth-Morris-Pratt automaton per stop string: O(new characters) per push, amortised.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

REPLACEMENT = "\ufffd"
MAX_PENDING_TOKENS = 8  # ids pending that long are settled as they are (U+FFFD and all)

Decode = Callable[[list[int]], str]


class IncrementalDetokenizer:
    """The text of a stream of token ids, handed out as it settles (see the module docstring).

    `decode` maps a list of token ids to text, as `Tokenizer.decode` (special tokens skipped).
    `text` is everything handed out so far; `num_tokens` the ids pushed so far.
    """

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self._window: list[int] = []  # the ids from prefix_offset on
        self._read = 0                # read_offset, within the window: the context's length
        self._context_chars = 0       # len(decode(window[:read]))
        self._pending_chars = 0       # text of the pending ids already handed out
        self._pieces: list[str] = []
        self.num_chars = 0
        self.num_tokens = 0

    @property
    def text(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def push(self, token_ids: Sequence[int]) -> str:
        """Add new token ids; return the text they settle (possibly empty)."""
        if not token_ids:
            return ""
        window = self._window
        stalled = len(window) - self._read  # ids already pending before this push
        window.extend(token_ids)
        self.num_tokens += len(token_ids)
        text = self._decode(window)
        start = self._context_chars + self._pending_chars
        if text.endswith(REPLACEMENT) and stalled < MAX_PENDING_TOKENS:
            # A character is not complete yet: hand out only what comes before it.
            end = len(text.rstrip(REPLACEMENT))
            if end <= start:
                return ""
            self._pending_chars = end - self._context_chars
            return self._emit(text[start:end])
        new = text[start:]
        if len(text) > self._context_chars:
            # The pending ids become the context; what came before them is no longer needed.
            del window[:self._read]
            self._context_chars = len(self._decode(window))
        else:
            # No text at all (skipped special tokens): drop them and keep the context, which
            # still gives the next token its leading space.
            del window[self._read:]
        self._read = len(window)
        self._pending_chars = 0
        return self._emit(new)

    def _emit(self, new: str) -> str:
        if new:
            self._pieces.append(new)
            self.num_chars += len(new)
        return new


class StopStringMatcher:
    """The first occurrence of any of `stops` in a text pushed piece by piece.

    `push(new)` returns the start (in the whole text) of the earliest stop string once one has
    appeared, else None; once found, the match stays (later pushes return it unchanged).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._keep = max(map(len, self._stops), default=1) - 1  # chars a new match may reuse
        self._tail = ""
        self._num_chars = 0
        self.match: int | None = None

    def push(self, new: str) -> int | None:
        if self.match is not None or not new:
            return self.match
        region = self._tail + new
        hits = [i for i in (region.find(s) for s in self._stops) if i >= 0]
        if hits:
            # Nothing matched before, so every match ends in `new`, and the earliest in the
            # region is the earliest in the whole text.
            self.match = self._num_chars - len(self._tail) + min(hits)
        self._num_chars += len(new)
        self._tail = region[-self._keep:] if self._keep else ""
        return self.match


@functools.lru_cache(maxsize=256)
def _borders(stop: str) -> tuple[int, ...]:
    """KMP failure table: entry i is the length of the longest proper prefix of stop[:i + 1]
    that is also a suffix of it."""
    borders = [0] * len(stop)
    k = 0
    for i in range(1, len(stop)):
        c = stop[i]
        while k and stop[k] != c:
            k = borders[k - 1]
        if stop[k] == c:
            k += 1
        borders[i] = k
    return tuple(borders)


class StopPrefixTracker:
    """For a text pushed piece by piece: the longest tail that is a proper prefix of one of
    `stops` (text that may yet turn out to be a stop string), and `match`, the start of the
    first complete stop string (None until one appears)."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._states = [0] * len(self._stops)  # per stop: its longest prefix the text ends with
        self._num_chars = 0
        self.match: int | None = None

    def push(self, new: str) -> int:
        """Add text; return the length of the longest tail that may start a stop string."""
        states, base, first = self._states, self._num_chars, None
        for k, stop in enumerate(self._stops):
            q, i, n, size = states[k], 0, len(new), len(stop)
            borders = _borders(stop) if q else None
            while i < n:
                if q == 0:  # jump to the next place the stop string could start
                    i = new.find(stop[0], i)
                    if i < 0:
                        break
                    q, i = 1, i + 1
                else:
                    c = new[i]
                    if borders is None:
                        borders = _borders(stop)
                    while q and stop[q] != c:
                        q = borders[q - 1]
                    if stop[q] == c:
                        q += 1
                    i += 1
                if q == size:  # a complete stop string; the earliest of this push counts
                    if first is None or base + i - size < first:
                        first = base + i - size
                    q = _borders(stop)[q - 1]
            states[k] = q
        if self.match is None:
            self.match = first
        self._num_chars += len(new)
        return max(states, default=0)


class StopStringScanner:
    """The engine's per-call state for a call with stop strings: its output tokens' text, and
    where the earliest stop string in it starts."""

    def __init__(self, decode: Decode, stops: Sequence[str]) -> None:
        self._detokenizer = IncrementalDetokenizer(decode)
        self._matcher = StopStringMatcher(stops)

    @property
    def num_tokens(self) -> int:
        """Output tokens pushed so far."""
        return self._detokenizer.num_tokens

    def push(self, token_ids: Sequence[int]) -> int | None:
        """Add new output tokens; the start of the earliest stop string once one appears."""
        return self._matcher.push(self._detokenizer.push(token_ids))

    def text_before(self, position: int) -> str:
        return self._detokenizer.text[:position]
