"""Programs inferred from conversations, for clients that name none: the HTTP door's
`--infer-programs` (items: a chat request's messages) and the simulator's `--program-ids
inferred` (items: a prompt's token slices between message boundaries).

A request is a sequence of items. A request whose items extend an earlier request's (the
earlier ones are a proper prefix: that request's messages, then its reply and what came
after) continues that conversation, so it joins the program the earlier request ran in.

Lookup: every prefix of a request has a chained digest (the item's 128-bit blake2b keyed
with the previous prefix's digest: no two item sequences share one short of a collision),
and the index maps (tenant, digest of a recorded request's items) to its program. `join`
probes the request's proper prefixes longest first, one dict probe each: its cost grows
with the request's length, never with the number of conversations stored. So of several
earlier requests it extends, the longest wins (the closest turn of the conversation); of
requests with equal items, the one recorded last.

Bounds: an entry lives `ttl` seconds from its last use (recorded, or joined); at most
`max_per_tenant` entries per tenant and `max_entries` in all, the least recently used
evicted first. Time is the caller's `now` (seconds of one monotonic clock, never going
back).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

DIGEST_BYTES = 16
DEFAULT_MAX_PER_TENANT = 16_384
DEFAULT_MAX_ENTRIES = 65_536


def chain_digests(items: Sequence[bytes]) -> list[bytes]:
    """The digest of each prefix of `items`: entry k covers items[:k + 1]."""
    digests, previous = [], b""
    for item in items:
        previous = hashlib.blake2b(item, digest_size=DIGEST_BYTES, key=previous).digest()
        digests.append(previous)
    return digests


@dataclass
class _Entry:
    program_id: str
    last_used: float


class ProgramInference:
    """(tenant, a recorded request's items) -> the program it ran in, bounded (see the
    module). Tenants never see each other's entries; None is a tenant like any other."""

    def __init__(self, ttl: float, max_per_tenant: int = DEFAULT_MAX_PER_TENANT,
                 max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl: must be positive, got {ttl}")
        if max_per_tenant < 1 or max_entries < 1:
            raise ValueError(f"max_per_tenant and max_entries: must be >= 1, got "
                             f"{max_per_tenant} and {max_entries}")
        self.ttl, self.max_per_tenant, self.max_entries = ttl, max_per_tenant, max_entries
        # (tenant, digest) -> entry, least recently used first; and per tenant, its digests
        # in the same order (for its own cap).
        self._entries: OrderedDict[tuple[str | None, bytes], _Entry] = OrderedDict()
        self._tenants: dict[str | None, OrderedDict[bytes, None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def join(self, tenant: str | None, items: Sequence[bytes], now: float) -> str | None:
        """The program of the longest live earlier request of `tenant` whose items are a
        proper prefix of `items` (None: none); that entry counts as used at `now`."""
        self._expire(now)
        for digest in reversed(chain_digests(items)[:-1]):
            entry = self._entries.get((tenant, digest))
            if entry is not None:
                self._use(tenant, digest, entry, now)
                return entry.program_id
        return None

    def record(self, tenant: str | None, items: Sequence[bytes], program_id: str,
               now: float) -> None:
        """Remember that `tenant`'s request of `items` ran in `program_id` (replacing an
        entry of the same items), evicting the least recently used past the caps;
        ValueError for empty `items`."""
        if not items:
            raise ValueError("items: a request has at least one")
        self._expire(now)
        digest = chain_digests(items)[-1]
        self._use(tenant, digest, _Entry(program_id, now), now)
        order = self._tenants[tenant]
        while len(order) > self.max_per_tenant:
            self._drop(tenant, next(iter(order)))
        while len(self._entries) > self.max_entries:
            self._drop(*next(iter(self._entries)))

    def _use(self, tenant: str | None, digest: bytes, entry: _Entry, now: float) -> None:
        """Store `entry` as the most recently used, at `now`."""
        entry.last_used = now
        key = (tenant, digest)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        order = self._tenants.setdefault(tenant, OrderedDict())
        order[digest] = None
        order.move_to_end(digest)

    def _expire(self, now: float) -> None:
        """Drop the entries last used `ttl` or more before `now` (the oldest come first)."""
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.last_used + self.ttl > now:
                return
            self._drop(*key)

    def _drop(self, tenant: str | None, digest: bytes) -> None:
        del self._entries[(tenant, digest)]
        order = self._tenants[tenant]
        del order[digest]
        if not order:
            del self._tenants[tenant]
