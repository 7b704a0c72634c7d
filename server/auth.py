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
