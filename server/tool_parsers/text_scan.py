"""Scanning helper for streams: how much of a text's end could begin a marker."""

from __future__ import annotations


def partial_marker_len(text: str, marker: str) -> int:
    """The length of the longest proper prefix of `marker` that `text` ends with (0 if none):
    the characters to hold back because more text could complete the marker."""
    start = text.find(marker[0], max(len(text) - len(marker) + 1, 0))
    while start >= 0:
        if marker.startswith(text[start:]):
            return len(text) - start
        start = text.find(marker[0], start + 1)
    return 0
