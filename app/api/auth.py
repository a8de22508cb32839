"""Bearer-key authentication: the ``tenant`` dependency every /v1 route takes."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency

from app import errors
from app.store import Database, tenants


@dataclass(frozen=True)
class TenantContext:
    tenant_id: UUID
    name: str


async def provide_db(state: State) -> Database:
    return state.db


async def provide_tenant(request: Request, state: State) -> TenantContext:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise errors.Unauthorized()
    keys: tenants.KeyCache = state.key_cache
    principal = await keys.resolve(state.db, key.strip())
    if principal is None:
        raise errors.Unauthorized("the API key is unknown or revoked")
    if principal.tenant_id is None:
        raise errors.Forbidden("a pool worker key cannot use the REST API")
    request.state.tenant_id = principal.tenant_id  # for the request's log line (app.api.telemetry)
    return TenantContext(principal.tenant_id, principal.tenant_name or "")


# What handlers declare: injected by name (the app factory registers "db" and "tenant").
DB = NamedDependency[Database]
Tenant = NamedDependency[TenantContext]
