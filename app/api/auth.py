"""Bearer-key authentication: the ``tenant`` dependency every /v1 route takes.

A client address that fails to authenticate too often is throttled: each failed attempt (no key,
a malformed header, an unknown or revoked key) takes a token from the address's bucket, which holds
``KAIROS_AUTH_FAILURE_LIMIT`` and refills that many per ``KAIROS_AUTH_FAILURE_WINDOW_S``. While it
holds less than one, the address's failed attempts are answered 429 with ``Retry-After`` instead of
401, and the keys it presents are looked up one at a time per process (``KeyCache.resolve(queued=True)``)
after the key caches, so guessing costs the database one lookup at a time. A valid key is never
refused for failures made from the same address: clients behind one NAT or proxy, or an attacker
naming the address, cannot lock a tenant out. The buckets are per API process (docs/quotas.md). The
address is the TCP peer, or what a proxy listed in ``KAIROS_TRUSTED_PROXIES`` forwarded.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn
from uuid import UUID

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency

from app import errors, observability
from app.config import Settings
from app.domain.limits import TokenBuckets
from app.store import Database, tenants

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TenantContext:
    tenant_id: UUID
    name: str


class AuthThrottle:
    """Failed authentications per client address (see the module docstring); ``limit`` 0: none."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self.rate_per_s = limit / window_s
        self._clock = clock
        self._buckets = TokenBuckets()

    @classmethod
    def from_settings(cls, settings: Settings) -> AuthThrottle:
        return cls(settings.auth_failure_limit, settings.auth_failure_window_s)

    def wait_s(self, client: str) -> float:
        """Seconds ``client`` must wait before its key is looked at again (0: look at it now)."""
        if not self.limit:
            return 0.0
        return self._buckets.wait_s(client, self.limit, self.rate_per_s, self._clock())

    def failed(self, client: str) -> None:
        """Count one failed attempt of ``client``; the one that leaves it throttled is logged (attempts
        are not looked at while it is, so that is once per episode, not once per request)."""
        if not self.limit:
            return
        left = self._buckets.spend(client, self.limit, self.rate_per_s, self._clock())
        if left < 1:
            log.warning(
                "authentication throttled",
                extra={
                    "client": client,
                    "limit": self.limit,
                    "window_s": self.window_s,
                    "retry_after_s": math.ceil((1 - left) / self.rate_per_s),
                },
            )


def client_address(request: Request[Any, Any, Any]) -> str:
    """The peer's address (uvicorn puts the X-Forwarded-For of a proxy in KAIROS_TRUSTED_PROXIES there,
    and only of those; see docs/quotas.md)."""
    return request.client.host if request.client else ""


async def provide_db(state: State) -> Database:
    db: Database = state.db
    return db


def refuse_if_throttled(request: Request[Any, Any, Any], state: State) -> str:
    """The client's address; AuthenticationThrottled (429) while it is throttled. For a credential that
    can be guessed and costs nothing to check (the viewer's operator token): call it first."""
    throttle: AuthThrottle = state.auth_throttle
    client = client_address(request)
    if (wait := throttle.wait_s(client)) > 0:
        observability.auth_throttled.add(1)
        raise errors.AuthenticationThrottled(max(1, math.ceil(wait)))
    return client


def _refused(throttle: AuthThrottle, client: str, was_throttled: bool, refusal: errors.KairosError) -> NoReturn:
    """Raise 429 when the address is throttled already (the attempt costs no further token: the wait it
    is told stays the wait it has), else count the failed attempt and raise ``refusal``."""
    if was_throttled:
        observability.auth_throttled.add(1)
        raise errors.AuthenticationThrottled(max(1, math.ceil(throttle.wait_s(client))))
    throttle.failed(client)
    raise refusal


async def authenticate(
    throttle: AuthThrottle, keys: tenants.KeyCache, db: Database, client: str, authorization: str
) -> TenantContext:
    """The tenant whose key ``authorization`` (the header's value, "" for none) bears, for a request from
    ``client``; raises Unauthorized, AuthenticationThrottled or Forbidden. Every /v1 route's check:
    ``provide_tenant`` for the Litestar routes, ``app.api.jobs.create_route`` for POST /v1/jobs."""
    throttled = throttle.wait_s(client) > 0
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        _refused(throttle, client, throttled, errors.Unauthorized())
    principal = await keys.resolve(db, key.strip(), queued=throttled)
    if principal is None:
        _refused(throttle, client, throttled, errors.Unauthorized("the API key is unknown or revoked"))
    if principal.tenant_id is None:
        raise errors.Forbidden("a pool worker key cannot use the REST API")
    return TenantContext(principal.tenant_id, principal.tenant_name or "")


async def provide_tenant(request: Request[Any, Any, Any], state: State) -> TenantContext:
    tenant = await authenticate(
        state.auth_throttle,
        state.key_cache,
        state.db,
        client_address(request),
        request.headers.get("authorization", ""),
    )
    request.state.tenant_id = tenant.tenant_id  # for the request's log line (app.api.telemetry)
    return tenant


# What handlers declare: injected by name (the app factory registers "db" and "tenant").
DB = NamedDependency[Database]
Tenant = NamedDependency[TenantContext]
