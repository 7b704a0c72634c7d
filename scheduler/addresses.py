"""`HOST:PORT` addresses: the one parser and the one formatter of the addresses the engine
(`dist_init_addr`), the server and the router (`--replica`, `--replicas-dns`, where they
listen) take and print. Here, at the bottom of the dependency order beside
`scheduler.ids`, every package may import it without torch."""

from __future__ import annotations

MAX_PORT = 65535


def parse_address(text: str, name: str, shape: str = "HOST:PORT") -> tuple[str, int]:
    """`text` as (HOST, PORT), an IPv6 HOST without its brackets; ValueError naming `name`
    (the field or flag) and the `shape` expected unless HOST is not empty and PORT is a
    number in [1, MAX_PORT]."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        raise ValueError(f"{name}: expected {shape} with a port in [1, {MAX_PORT}], got "
                         f"{text!r}")
    return host, int(port)


def format_address(host: str, port: int) -> str:
    """`HOST:PORT` as gRPC targets and URLs write it: an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
