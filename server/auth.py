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


@dataclass(frozen=True)
class TokenAuth:
    """Maps the `authorization: Bearer <token>` metadata of a call to its tenant."""

    tokens: Mapping[str, str] = field(hash=False)

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError("tokens must not be empty (no one could call the server)")
        object.__setattr__(self, "tokens", MappingProxyType(dict(self.tokens)))

    def tenant_of(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
        """The tenant of the bearer token in `metadata`, or None if there is none or it is
        unknown. Compares against every token in constant time per token."""
        presented = None
        for key, value in metadata or ():
            if key.lower() == "authorization" and isinstance(value, str):
                scheme, _, credentials = value.strip().partition(" ")
                if scheme.lower() == "bearer":
                    presented = credentials.strip()
        if not presented:
            return None
        tenant = None
        for token, owner in self.tokens.items():
            if hmac.compare_digest(token.encode(), presented.encode()):
                tenant = owner
        return tenant
