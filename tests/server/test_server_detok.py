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
