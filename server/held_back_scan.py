"""The streaming half every output parser shares: text fed is held back until the parser's
`_scan` decides it, and each decided piece becomes zero or more fragments."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

Piece = TypeVar("Piece")
Fragment = dict[str, Any]


class HeldBackScanner(ABC, Generic[Piece]):
    """`feed` deltas, then `finish` once. Subclasses decide text in `_scan` (which sees the
    undecided rest of the output, and may decide only a prefix of it unless `final`) and turn
    decided pieces into fragments in `_fragments`."""

    def __init__(self) -> None:
        self._pending = ""  # text fed but not yet decided by _scan

    @abstractmethod
    def _scan(self, text: str, final: bool) -> tuple[list[Piece], int]:
        """The pieces of a decided prefix of `text`, in order, and that prefix's length; with
        `final` all of `text` is decided."""

    @abstractmethod
    def _fragments(self, pieces: list[Piece]) -> list[Fragment]:
        """The fragments that `pieces`, decided in order, send now (maybe none)."""

    def feed(self, delta: str) -> list[Fragment]:
        """Take the next text of the output; return the fragments now decided (maybe none)."""
        self._pending += delta
        pieces, used = self._scan(self._pending, final=False)
        self._pending = self._pending[used:]
        return self._fragments(pieces)

    def finish(self) -> list[Fragment]:
        """End the stream: return the fragments for everything still held back."""
        pieces, _ = self._scan(self._pending, final=True)
        self._pending = ""
        return self._fragments(pieces)
