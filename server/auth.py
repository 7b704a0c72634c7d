"""Bearer-token authentication: each token belongs to one tenant.

Token file format: one `TOKEN TENANT` pair per line; blank lines and `#` comments (whole line
or trailing) are ignored. A token names its tenant, so whoever holds it is that tenant for
the scheduler's accounting and owns the programs it starts.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

from scheduler.ids import check_id

SEPARATOR = "/"  # tenant namespaces use it (server/namespace.py): never in a tenant name


def parse_tokens(lines: Iterable[str], source: str = "<tokens>") -> dict[str, str]:
    """token -> tenant from `TOKEN TENANT` lines; ValueError naming the line if one is
    malformed, a token repeats, or there is no token at all (tokens are never echoed)."""
    tokens: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ValueError(f"{source}:{number}: expected 'TOKEN TENANT', got {len(words)} "
                             f"field(s)")
        token, tenant = words
        try:
            check_id("tenant", tenant)
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: {exc}") from None
        if SEPARATOR in tenant:
            raise ValueError(f"{source}:{number}: tenant: must not contain {SEPARATOR!r}")
        if token in tokens:
            raise ValueError(f"{source}:{number}: this token already appeared on an earlier line")
        tokens[token] = tenant
    if not tokens:
        raise ValueError(f"{source}: no 'TOKEN TENANT' lines")
    return tokens


def load_tokens(path: str | Path) -> dict[str, str]:
    """Read a token file (see the module docstring)."""
    path = Path(path)
    return parse_tokens(path.read_text().splitlines(), str(path))


class AuthError(Exception):
    """The request carries no usable credentials (UNAUTHENTICATED, HTTP 401)."""


@dataclass(frozen=True)
class TokenAuth:
    """Maps the `authorization: Bearer <token>` metadata of a call to its tenant. The scheme
    is matched case-insensitively and surrounding spaces are ignored (as HTTP allows); a
    request with more than one authorization header is refused as ambiguous."""

    tokens: Mapping[str, str] = field(hash=False)

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError("tokens must not be empty (no one could call the server)")
        object.__setattr__(self, "tokens", MappingProxyType(dict(self.tokens)))

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
        """The tenant of the request's bearer token; AuthError saying what is wrong.
        Compares against every token in constant time per token."""
        headers = [value for key, value in metadata or () if key.lower() == "authorization"]
        if len(headers) > 1:
            raise AuthError("authorization: more than one authorization header")
        scheme, _, credentials = (headers[0] if headers and isinstance(headers[0], str)
                                  else "").strip().partition(" ")
        presented = credentials.strip() if scheme.lower() == "bearer" else ""
        if not presented:
            raise AuthError("authorization: missing bearer token")
        tenant = None
        for token, owner in self.tokens.items():
            if hmac.compare_digest(token.encode(), presented.encode()):
                tenant = owner
        if tenant is None:
            raise AuthError("authorization: unknown bearer token")
        return tenant


ROUTER_TOKEN_HEADER = "x-agentix-router-token"


def load_router_token(path: str | Path) -> str:
    """The router token in `path`: the file's one non-blank, non-comment line, stripped
    (ValueError naming the file when there is none or more than one, or it has a space)."""
    path = Path(path)
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    tokens = [line for line in lines if line]
    if len(tokens) != 1 or len(tokens[0].split()) != 1:
        raise ValueError(f"{path}: expected one line holding the router token, got "
                         f"{len(tokens)} line(s)")
    return tokens[0]


@dataclass(frozen=True)
class RouterTrust:
    """Whether a request comes from this replica's trusted router: its metadata carries
    `x-agentix-router-token: <token>` equal (constant-time compare) to the replica's own.
    Only such a request may carry a program's global priority value (`program_priority`)."""

    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.token or len(self.token.split()) != 1:
            raise ValueError("router_token: must be one non-empty word")

    def trusted(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
        values = [value for key, value in metadata or () if key.lower() == ROUTER_TOKEN_HEADER]
        if len(values) != 1 or not isinstance(values[0], str):
            return False
        return hmac.compare_digest(self.token.encode(), values[0].strip().encode())

