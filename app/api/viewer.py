"""Who reads the figures: a tenant (its API key) or the operator (``KAIROS_ADMIN_TOKEN``).

The read-only routes of ``/v1/stats`` and ``/v1/status`` take a ``viewer`` instead of a
``tenant``. A tenant key sees that tenant's rows only, exactly as on the other /v1 routes. The
admin token (compared in constant time; unset means nobody is the operator) sees every tenant,
or one named by ``?tenant=<name>``. The token grants nothing else: every other route still needs
a tenant key.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from app import errors
from app.api.auth import provide_tenant, refuse_if_throttled


@dataclass(frozen=True)
class Viewer:
    """What one request may read: ``tenant_id`` None means every tenant (the operator, no ?tenant=)."""

    admin: bool
    tenant_id: UUID | None
    tenant_name: str | None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def is_admin_token(presented: str, admin_token: str) -> bool:
    """Constant time whatever the lengths: equal-length digests are compared, never the strings."""
    return bool(admin_token) and hmac.compare_digest(_digest(presented), _digest(admin_token))


def bearer(request: Request[Any, Any, Any]) -> str:
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


async def provide_viewer(
    request: Request[Any, Any, Any],
    state: State,
    chosen: Annotated[
        str | None,
        QueryParameter(name="tenant", description="the operator's admin token only: one tenant's figures (by name)"),
    ] = None,
) -> Viewer:
    if is_admin_token(bearer(request), state.settings.admin_token):
        # The operator's token may be short enough to guess: a throttled address gets no answer that
        # tells a right guess from a wrong one (a tenant key, a 256-bit token, is let through below).
        refuse_if_throttled(request, state)
        if chosen is None:
            return Viewer(admin=True, tenant_id=None, tenant_name=None)
        if not chosen.strip():
            raise errors.InvalidInput("tenant", "names a tenant; leave it out for every tenant")
        tenant = await state.db.transaction(lambda tx: tx.tenants.get_by_name(chosen))
        if tenant is None:
            raise errors.TenantNotFound(f"no tenant named {chosen!r}")
        return Viewer(admin=True, tenant_id=tenant.tenant_id, tenant_name=tenant.name)
    context = await provide_tenant(request, state)  # 401/403 exactly as on every other /v1 route
    if chosen is not None:
        raise errors.Forbidden("only the operator's admin token may choose a tenant; a tenant key sees its own")
    return Viewer(admin=False, tenant_id=context.tenant_id, tenant_name=context.name)


# What handlers declare; the stats and status controllers register "viewer" themselves.
ViewerDep = NamedDependency[Viewer]
