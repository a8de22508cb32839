"""Bearer-key authentication: the ``tenant`` dependency every /v1 route takes.

A client address that fails to authenticate too often is throttled: each failed attempt (no key,
a malformed header, an unknown or revoked key) takes a token from the address's bucket, which holds
``KAIROS_AUTH_FAILURE_LIMIT`` and refills that many per ``KAIROS_AUTH_FAILURE_WINDOW_S``. While it
holds less than one, the address's requests are answered 429 with ``Retry-After`` before the key is
looked at, so guessing keys costs the guesser time and the database nothing. The buckets are per
API process (docs/quotas.md).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
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
            log.warning("authentication throttled", extra={
                "client": client, "limit": self.limit, "window_s": self.window_s,
                "retry_after_s": math.ceil((1 - left) / self.rate_per_s)})


def client_address(request: Request) -> str:
    """The peer's address (uvicorn puts a trusted proxy's X-Forwarded-For there; see docs/quotas.md)."""
    return request.client.host if request.client else ""


async def provide_db(state: State) -> Database:
    return state.db


def refuse_if_throttled(request: Request, state: State) -> str:
    """The client's address; AuthenticationThrottled (429) while it is throttled. Call it before
    looking at any credential the request carries (the viewer's admin token too)."""
    throttle: AuthThrottle = state.auth_throttle
    client = client_address(request)
    if (wait := throttle.wait_s(client)) > 0:
        observability.auth_throttled.add(1)
        raise errors.AuthenticationThrottled(max(1, math.ceil(wait)))
    return client


async def provide_tenant(request: Request, state: State) -> TenantContext:
    client = refuse_if_throttled(request, state)
    throttle: AuthThrottle = state.auth_throttle
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        throttle.failed(client)
        raise errors.Unauthorized()
    keys: tenants.KeyCache = state.key_cache
    principal = await keys.resolve(state.db, key.strip())
    if principal is None:
        throttle.failed(client)
        raise errors.Unauthorized("the API key is unknown or revoked")
    if principal.tenant_id is None:
        raise errors.Forbidden("a pool worker key cannot use the REST API")
    request.state.tenant_id = principal.tenant_id  # for the request's log line (app.api.telemetry)
    return TenantContext(principal.tenant_id, principal.tenant_name or "")


# What handlers declare: injected by name (the app factory registers "db" and "tenant").
DB = NamedDependency[Database]
Tenant = NamedDependency[TenantContext]
