"""Incremental detokenization: only settled text is streamed, and the pieces add up to the
final text."""

from __future__ import annotations

from server.detok import IncrementalText, stop_prefix_len

BYTES = {1: b"h", 2: b"\xc3", 3: b"\xa9", 4: b" ", 5: b"S", 6: b"T", 7: b"OP"}


def decode(ids: list[int]) -> str:
    """A byte-level decoder: an incomplete UTF-8 sequence decodes to U+FFFD."""
    return b"".join(BYTES[i] for i in ids).decode("utf-8", errors="replace")


def test_incomplete_utf8_is_held_back():
    text = IncrementalText(decode)
    assert text.push([1]) == "h"
    assert text.push([2]) == ""        # first byte of "é" alone: U+FFFD, held back
    assert text.push([3]) == "é"
    assert text.push([4, 2]) == " "
    assert text.finish(decode([1, 2, 3, 4, 2])) == "\ufffd"  # the final text has it all


def test_possible_stop_string_prefix_is_held_back():
    text = IncrementalText(decode, stops=("STOP",))
    assert text.push([1, 4]) == "h "
    assert text.push([5]) == ""        # "S" may start "STOP"
    assert text.push([6]) == ""        # "ST" too
    assert text.finish("h ") == ""     # the engine cut "STOP": nothing of it was streamed
    text = IncrementalText(decode, stops=("STOP",))
    assert text.push([5, 1]) == "Sh"   # "S" then "h": not the stop string after all
    assert text.sent == "Sh"


def test_no_tokenizer_streams_no_text():
    text = IncrementalText(None)
    assert text.push([1, 2]) == ""
    assert text.finish("") == ""


def test_stop_prefix_len():
    assert stop_prefix_len("abc", ["cd"]) == 1
    assert stop_prefix_len("abc", ["bcd", "cd"]) == 2
    assert stop_prefix_len("abc", ["abc"]) == 0  # a whole stop string is the engine's to cut
    assert stop_prefix_len("abc", ["x"]) == 0
    assert stop_prefix_len("", ["ab"]) == 0


def test_pushes_decode_a_bounded_window_and_release_everything_in_the_end():
    """Each push decodes a few recent tokens, never the whole output; the released pieces
    (with the finish) add up to the full text, with a stop string's prefix held meanwhile."""
    sizes = []

    def counting(ids):
        sizes.append(len(ids))
        return decode(ids)

    ids = [1, 2, 3, 4, 5, 6, 4] * 300  # "hé ST " (a stop string's start) repeated
    text = IncrementalText(counting, stops=("STOP", "é" * 200))
    pieces = []
    for token in ids:
        pieces.append(text.push([token]))
        assert len(sizes) <= 2 * len(pieces)
    assert max(sizes) <= 16
    full = decode(ids)
    assert "".join(pieces) == text.sent and full.startswith(text.sent)
    assert text.finish(full) == full[len(text.sent):]
    assert text.sent == full


def test_a_long_stop_prefix_is_held_until_it_breaks_off():
    text = IncrementalText(decode, stops=("h" * 100 + "S",))
    assert text.push([1] * 150) == "h" * 50  # the last 100 "h" may still start the stop
    assert text.push([1]) == "h"
    assert text.push([4]) == "h" * 100 + " "


def test_a_complete_stop_string_is_never_released():
    """The engine cuts a stop string and finishes the call in the same step, so the stream
    never sees it; were it pushed anyway, nothing from it on would be released."""
    text = IncrementalText(decode, stops=("ST",))
    assert text.push([1, 5, 6, 7, 4, 1]) == "h"
    assert text.push([1]) == ""
    assert text.finish("h") == ""
