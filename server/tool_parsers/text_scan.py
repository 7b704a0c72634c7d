"""Scanning helper for streams: how much of a text's end could begin a marker."""

from __future__ import annotations


def partial_marker_len(text: str, marker: str) -> int:
    """The length of the longest proper prefix of `marker` that `text` ends with (0 if none):
    the characters to hold back because more text could complete the marker."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
