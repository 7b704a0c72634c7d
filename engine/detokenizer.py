"""Incremental detokenization and stop-string scanning, at a cost per new token that does not
grow with the length of the output.

`IncrementalDetokenizer` turns a stream of token ids into a stream of text. Decoding each token
on its own is wrong (a byte-level token may hold part of a UTF-8 character, and SentencePiece
and word-level tokenizers give a token its leading space only after another token), and
decoding the whole output again for every token costs O(n) per token. So it decodes a short
window of recent tokens (from the prefix offset on) and keeps a read offset into the window's
text: what lies beyond it is new. The read offset is kept in characters rather than tokens, a
variant of the usual prefix_offset/read_offset scheme: byte-level BPE tokens often straddle
characters (CJK, emoji), so the text may not end on a token boundary for many tokens in a row.
Up to three trailing U+FFFD are held back, since they may be a character not complete yet (one
U+FFFD for a truncated sequence in byte-level BPE, one per byte in SentencePiece's byte
fallback, a sequence being at most 3 bytes short). Once the window holds 2 * WINDOW_TOKENS
tokens it slides to its last WINDOW_TOKENS, after checking that their text ends exactly as the
window's did after the read offset. Tokens that add no text while nothing is pending (skipped
special tokens) are dropped from the window at once. Per token: one decode of at most
2 * WINDOW_TOKENS tokens, plus one of WINDOW_TOKENS every WINDOW_TOKENS tokens.

The text it hands out is append-only and, after every token, equals the full decode
(`decode(all_ids)`) less its (up to 3) trailing U+FFFD, for tokenizers whose decode of a window
ends as the full decode does: byte-level BPE, SentencePiece, word-level. (Should the check
before a slide keep failing, a window of 4 * WINDOW_TOKENS slides anyway, so the cost stays
bounded whatever the tokenizer; only then could the text differ from the full decode. The
engine's final text is the full decode in any case.)

`StopStringMatcher` finds the first stop string in such a stream of text: each push searches
only the new text plus the previous (longest stop - 1) characters, since a stop string that was
not there before must end in the new text. `StopPrefixTracker` follows, for streaming, the
longest tail of the text that could still grow into a stop string (the text to hold back),
with one Knuth-Morris-Pratt automaton per stop string: O(new characters) per push, amortised.
"""

from __future__ import annotations

from typing import Callable, Sequence

REPLACEMENT = "\ufffd"
MAX_HELD_REPLACEMENTS = 3  # trailing U+FFFD that a later token may still turn into a character
WINDOW_TOKENS = 8          # tokens a window keeps when it slides (it slides at twice that)

Decode = Callable[[list[int]], str]


class IncrementalDetokenizer:
    """The text of a stream of token ids, handed out as it settles (see the module docstring).

    `decode` maps a list of token ids to text, as `Tokenizer.decode` (special tokens skipped).
    `text` is everything handed out so far; `num_tokens` the ids pushed so far.
    """

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self._window: list[int] = []  # the most recent ids (from the prefix offset on)
        self._window_text = ""        # decode(window)
        self._read = 0                # read offset: chars of the window's text handed out
        self._pieces: list[str] = []
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
        self.num_tokens += len(token_ids)
        window = self._window
        window.extend(token_ids)
        text = self._decode(window)
        if self._read == len(text) and text == self._window_text:
            # No text, nothing pending (skipped special tokens): they need not stay around.
            del window[len(window) - len(token_ids):]
            return ""
        end = len(text)
        while end > max(self._read, len(text) - MAX_HELD_REPLACEMENTS) \
                and text[end - 1] == REPLACEMENT:
            end -= 1
        new = text[self._read:end]
        self._window_text, self._read = text, max(self._read, end)
        if len(window) >= 2 * WINDOW_TOKENS:
            self._slide()
        if new:
            self._pieces.append(new)
        return new

    def _slide(self) -> None:
        """Keep only the last WINDOW_TOKENS ids, if their text ends as the window's does."""
        tail = self._window[-WINDOW_TOKENS:]
        text = self._decode(tail)
        pending = len(self._window_text) - self._read  # chars not handed out yet
        read = len(text) - pending
        if (read > 0 and text[read:] == self._window_text[self._read:]) \
                or len(self._window) >= 4 * WINDOW_TOKENS:
            self._window, self._window_text, self._read = tail, text, max(read, 0)


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
        self._borders = [_borders(stop) for stop in self._stops]
        self._states = [0] * len(self._stops)  # per stop: its longest prefix the text ends with
        self._num_chars = 0
        self.match: int | None = None

    def push(self, new: str) -> int:
        """Add text; return the length of the longest tail that may start a stop string."""
        states, base, first = self._states, self._num_chars, None
        for k, stop in enumerate(self._stops):
            q, i, n, size = states[k], 0, len(new), len(stop)
            borders = self._borders[k]
            while i < n:
                if q == 0:  # jump to the next place the stop string could start
                    i = new.find(stop[0], i)
                    if i < 0:
                        break
                    q, i = 1, i + 1
                else:
                    c = new[i]
                    while q and stop[q] != c:
                        q = borders[q - 1]
                    if stop[q] == c:
                        q += 1
                    i += 1
                if q == size:  # a complete stop string; the earliest of this push counts
                    if first is None or base + i - size < first:
                        first = base + i - size
                    q = borders[q - 1]
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
