"""Replica discovery by DNS: `agentix router --replicas-dns NAME:PORT` routes to every address
behind NAME (a Kubernetes headless Service names one per ready pod) and re-resolves it every
`refresh_seconds`.

Each refresh resolves every name and hands the union of their addresses to
`Router.set_addresses`, which keeps the router's static replicas (`--replica`) beside them
whatever the names resolve to: new addresses join (taking calls from their first SERVING
answer), vanished ones retire (no new call; their calls in flight go on, and a replica that
is really gone fails them over as any lost replica does). A name that fails to resolve keeps its last
addresses, so a DNS hiccup never empties the router. The resolver is injectable (tests
script it): `resolve(host, port)` returns the `HOST:PORT` addresses behind the name.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence

from scheduler.addresses import format_address, parse_address
from server.limits import DEFAULT_DNS_REFRESH_SECONDS
from server.router.core import Router

log = logging.getLogger(__name__)
Resolver = Callable[[str, int], Awaitable[list[str]]]


def parse_dns_name(text: str) -> tuple[str, int]:
    """`NAME:PORT` -> (NAME, PORT); ValueError naming replicas-dns otherwise."""
    return parse_address(text, "replicas-dns", "NAME:PORT")


async def resolve_dns(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA records, through the system resolver),
    as sorted `HOST:PORT` strings; OSError when it does not resolve."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({format_address(info[4][0], port) for info in infos})


class Discovery:
    """Keeps `router`'s replica set equal to its static replicas plus what `names` resolve
    to (see the module docstring). `refresh()` resolves once; `run()` refreshes until
    cancelled."""

    def __init__(self, router: Router, names: Sequence[str], resolve: Resolver = resolve_dns,
                 refresh_seconds: float = DEFAULT_DNS_REFRESH_SECONDS) -> None:
        if not names:
            raise ValueError("replicas-dns: at least one NAME:PORT is needed")
        if not refresh_seconds > 0:
            raise ValueError(f"refresh_seconds: must be positive, got {refresh_seconds}")
        self.router = router
        self.names = [parse_dns_name(name) for name in names]
        self.resolve = resolve
        self.refresh_seconds = refresh_seconds
        self._last: dict[tuple[str, int], list[str]] = {name: [] for name in self.names}

    async def refresh(self) -> list[str]:
        """Resolve every name and apply the union; returns it."""
        for name in self.names:
            try:
                self._last[name] = list(await self.resolve(*name))
            except (OSError, asyncio.TimeoutError) as exc:
                log.warning("discovery: %s:%d did not resolve (%s); keeping its %d address(es)",
                            name[0], name[1], exc, len(self._last[name]))
        addresses = [a for name in self.names for a in self._last[name]]
        await self.router.set_addresses(addresses)
        return addresses

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.refresh()
            except Exception:  # a bug here must not stop discovery for good
                log.exception("discovery: refresh failed")
