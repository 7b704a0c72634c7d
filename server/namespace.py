"""Tenant namespaces for client-chosen ids, and the server's own random ids.

With auth on, each tenant's program and call ids live apart: the engine sees
`TENANT/ID`, the client only ever `ID`. So one tenant can neither take nor block an id
another uses, and another tenant's program is simply not found (no existence oracle).
Without auth the tenant is whatever the client says, so ids are shared as given.
Tenant names never contain "/" (the token file is checked), so the split is unambiguous.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import grpc

from scheduler.ids import DuplicateCallError, check_id
from scheduler.process_table import ProgramExistsError, UnknownProgramError
from server.auth import SEPARATOR, AuthError, TokenAuth

ID_ERRORS = (UnknownProgramError, ProgramExistsError, DuplicateCallError)
RANDOM_ID_BYTES = 8  # 64 random bits: guessing another caller's next id is hopeless


def new_id(kind: str) -> str:
    """A server-chosen id: `kind-` and 16 random hex digits."""
    return f"{kind}-{secrets.token_hex(RANDOM_ID_BYTES)}"


@dataclass(frozen=True)
class Namespace:
    """The ids of one caller: `tenant` is the authenticated tenant (None with auth off)."""

    tenant: str | None

    def inner(self, field: str, client_id: str) -> str:
        """The engine's id for a client's id (ValueError naming `field` for a bad one)."""
        check_id(field, client_id)
        return client_id if self.tenant is None else f"{self.tenant}{SEPARATOR}{client_id}"

    def outer(self, engine_id: str) -> str:
        """The client's id for an engine id of this namespace."""
        if self.tenant is None:
            return engine_id
        return engine_id.removeprefix(f"{self.tenant}{SEPARATOR}")

    def outer_error(self, exc: Exception) -> Exception:
        """`exc` with the id it names as the client knows it (errors about one id carry it
        as their first argument)."""
        if self.tenant is not None and isinstance(exc, ID_ERRORS):
            return type(exc)(self.outer(exc.args[0]))
        return exc


async def caller_namespace(auth: TokenAuth | None, context: grpc.aio.ServicerContext
                           ) -> Namespace:
    """A gRPC caller's namespace: its token's tenant, or none with auth off (the call is
    aborted UNAUTHENTICATED with auth on and no usable token)."""
    if auth is None:
        return Namespace(None)
    try:
        return Namespace(auth.authenticate(context.invocation_metadata()))
    except AuthError as exc:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
