"""KV events: what entered and left a device prefix cache, for a router to read.

Every block the cache indexes is an event `stored`, every block it forgets (evicted,
reused) an event `removed`, numbered from 0 in a bounded log. A reader keeps the `epoch`
and `next` of its last digest and asks for what happened since (`digest`): the net change
per hash, or, when the log no longer reaches back that far (or the epoch differs: another
process, a restarted replica), a reset carrying every hash cached now. Hashes travel as
their low 64 bits (`wire_hash`), which is what a router compares its own chained
`hash_block` hashes against: a collision only misleads a placement, never serves KV.
"""

from __future__ import annotations

import collections
import itertools
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass

WIRE_MASK = (1 << 64) - 1
DEFAULT_LOG_EVENTS = 1 << 16


def wire_hash(block_hash: int) -> int:
    """A chained block hash as KV events carry it (its low 64 bits)."""
    return block_hash & WIRE_MASK


@dataclass(frozen=True)
class CacheDigest:
    """The change since a reader's last digest: `stored` and `removed` wire hashes (net:
    a hash is in at most one); with `reset`, `stored` is the whole cache and the reader
    forgets what it had. `epoch` and `next` are what to ask from next time."""

    epoch: int
    next: int
    reset: bool
    stored: tuple[int, ...]
    removed: tuple[int, ...]


class CacheEvents:
    """The bounded log of one prefix cache's events (`capacity` most recent)."""

    def __init__(self, capacity: int = DEFAULT_LOG_EVENTS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be positive, got {capacity}")
        self.epoch = secrets.randbits(63)
        # (wire hash, stored?) pairs: a dict of a slice of them is the net change per hash
        self._log: collections.deque[tuple[int, bool]] = collections.deque(maxlen=capacity)
        self._next = 0

    def stored(self, block_hash: int) -> None:
        self._log.append((wire_hash(block_hash), True))
        self._next += 1

    def removed(self, block_hash: int) -> None:
        self._log.append((wire_hash(block_hash), False))
        self._next += 1

    def digest(self, epoch: int, since: int, cached: Callable[[], Iterable[int]]
               ) -> CacheDigest:
        """What changed after event `since` of `epoch`; a reset (every hash of `cached()`,
        the full hashes cached now) when the log does not reach back to it."""
        first = self._next - len(self._log)
        if epoch != self.epoch or not first <= since <= self._next:
            return CacheDigest(self.epoch, self._next, True,
                               tuple(wire_hash(h) for h in cached()), ())
        # The newest events, read from the log's right end (a deque skips from the left one
        # by one), back in their order: in a dict of them the last event of a hash wins.
        events = list(itertools.islice(reversed(self._log), self._next - since))
        events.reverse()
        last = dict(events)
        return CacheDigest(self.epoch, self._next, False,
                           tuple(h for h, added in last.items() if added),
                           tuple(h for h, added in last.items() if not added))


class CacheView:
    """A reader's copy of one replica's cache, kept by its digests (`apply`)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.next = 0
        self.hashes: set[int] = set()

    def apply(self, digest: CacheDigest) -> None:
        if digest.reset:
            self.hashes = set(digest.stored)
        else:
            self.hashes.difference_update(digest.removed)
            self.hashes.update(digest.stored)
        self.epoch, self.next = digest.epoch, digest.next
