"""Stored Responses (`store`, `previous_response_id`, GET and DELETE /v1/responses/{id}): what
a continuation needs of each completed response, per tenant, bounded.

Bounds (`ResponseLimits`): at most `max_per_tenant` responses per tenant and `max_bytes` in
all (a response's size is the length of its JSON); storing past either evicts the least
recently used first (the tenant's own for the count, anyone's for the bytes), and a response
larger than `max_bytes` on its own is not stored. A response expires `ttl` seconds after its
last use (stored, read or continued). The store belongs to one event loop (no locking);
`check()` raises if its accounting is off.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable

from server.limits import DEFAULT_RESPONSES_MAX_BYTES, DEFAULT_RESPONSES_PER_TENANT

Key = tuple[str | None, str]  # (tenant, response id)


@dataclass(frozen=True)
class ResponseLimits:
    """The store's bounds; `ttl` None: the engine's program TTL (a chain's program and its
    responses then expire together)."""

    max_per_tenant: int = DEFAULT_RESPONSES_PER_TENANT
    max_bytes: int = DEFAULT_RESPONSES_MAX_BYTES
    ttl: float | None = None

    def __post_init__(self) -> None:
        if self.max_per_tenant <= 0:
            raise ValueError(f"responses_per_tenant: must be positive, got "
                             f"{self.max_per_tenant}")
        if self.max_bytes <= 0:
            raise ValueError(f"responses_max_bytes: must be positive, got {self.max_bytes}")
        if self.ttl is not None and not self.ttl > 0:
            raise ValueError(f"responses_ttl: must be positive, got {self.ttl}")


@dataclass(frozen=True)
class StoredResponse:
    """A completed response: `conversation`, the input items it answered (a previous
    response's already expanded); `response`, the response object as sent (its `output`
    included); `program_id`, the engine id of its chain's program, the one continuations of
    it run in (None: none yet, as for a response that continued nothing until its first
    continuation picks one; it may have ended, or not be started yet when the call meant to
    start it ran as a one-call program past a program cap)."""

    conversation: list[dict[str, Any]]
    response: dict[str, Any]
    program_id: str | None

    def continued(self) -> list[dict[str, Any]]:
        """The items a continuation starts from: the conversation, then the output."""
        return [*self.conversation, *self.response["output"]]

    def size(self) -> int:
        return len(json.dumps([self.conversation, self.response]))  # ASCII: chars are bytes


@dataclass
class _Entry:
    stored: StoredResponse
    size: int
    last_used: float


class ResponseStore:
    """Stored responses by (tenant, response id), least recently used first."""

    def __init__(self, limits: ResponseLimits, default_ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not default_ttl > 0:
            raise ValueError(f"default_ttl: must be positive, got {default_ttl}")
        self.limits = limits
        self.ttl = limits.ttl if limits.ttl is not None else default_ttl
        self.clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._tenants: dict[str | None, OrderedDict[str, None]] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def num_bytes(self) -> int:
        return self._bytes

    def put(self, tenant: str | None, response_id: str, stored: StoredResponse) -> bool:
        """Store `stored` (evicting as the bounds say); False when it alone exceeds
        `max_bytes` (then nothing is stored and nothing evicted)."""
        now = self.clock()
        self._expire(now)
        size = stored.size()
        if size > self.limits.max_bytes:
            return False
        self._remove((tenant, response_id))
        while len(self._tenants.get(tenant, ())) >= self.limits.max_per_tenant:
            self._remove((tenant, next(iter(self._tenants[tenant]))))
        while self._bytes + size > self.limits.max_bytes:
            self._remove(next(iter(self._entries)))
        self._entries[(tenant, response_id)] = _Entry(stored, size, now)
        self._tenants.setdefault(tenant, OrderedDict())[response_id] = None
        self._bytes += size
        return True

    def get(self, tenant: str | None, response_id: str) -> StoredResponse | None:
        """The tenant's stored response (None: unknown, expired, evicted, deleted or another
        tenant's); reading it is a use."""
        now = self.clock()
        self._expire(now)
        key = (tenant, response_id)
        entry = self._entries.get(key)
        if entry is None:
            return None
        entry.last_used = now
        self._entries.move_to_end(key)
        self._tenants[tenant].move_to_end(response_id)
        return entry.stored

    def chain_program(self, tenant: str | None, response_id: str, proposed: str,
                      ended: str | None = None) -> str:
        """The program a continuation of the tenant's response runs in: the one recorded on
        it, unless it has none yet or that one is `ended`; then `proposed`, recorded on it
        now, so that every continuation of it (a fork too) shares one program. `proposed`
        too when the response is no longer stored. Not a use."""
        self._expire(self.clock())
        entry = self._entries.get((tenant, response_id))
        if entry is None:
            return proposed
        current = entry.stored.program_id
        if current is not None and current != ended:
            return current
        entry.stored = replace(entry.stored, program_id=proposed)
        return proposed

    def delete(self, tenant: str | None, response_id: str) -> bool:
        """Forget the tenant's stored response; False when there was none."""
        self._expire(self.clock())
        return self._remove((tenant, response_id))

    def _remove(self, key: Key) -> bool:
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        tenant, response_id = key
        ids = self._tenants[tenant]
        del ids[response_id]
        if not ids:
            del self._tenants[tenant]
        self._bytes -= entry.size
        return True

    def _expire(self, now: float) -> None:
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.last_used + self.ttl > now:
                return
            self._remove(key)

    def check(self) -> None:
        """RuntimeError unless: the byte count is the sum of the entries' sizes and within
        `max_bytes`; each tenant's ids are its entries, within `max_per_tenant`, in the same
        order; entries are in last-use order."""
        if self._bytes != sum(e.size for e in self._entries.values()):
            raise RuntimeError(f"response store: {self._bytes} bytes counted, entries hold "
                               f"{sum(e.size for e in self._entries.values())}")
        if self._bytes > self.limits.max_bytes:
            raise RuntimeError(f"response store: {self._bytes} bytes held, the limit is "
                               f"{self.limits.max_bytes}")
        by_tenant: dict[str | None, list[str]] = {}
        for tenant, response_id in self._entries:
            by_tenant.setdefault(tenant, []).append(response_id)
        if by_tenant != {t: list(ids) for t, ids in self._tenants.items()}:
            raise RuntimeError("response store: the tenants' ids disagree with the entries")
        if any(len(ids) > self.limits.max_per_tenant for ids in by_tenant.values()):
            raise RuntimeError("response store: a tenant holds more than max_per_tenant")
        times = [e.last_used for e in self._entries.values()]
        if times != sorted(times):
            raise RuntimeError("response store: entries are not in last-use order")
