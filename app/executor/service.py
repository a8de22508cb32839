"""``kairos executor``: the built-in HTTP-target pool and the lease reaper, hosting a worker transport.

Each duty is a named asyncio task under a small supervisor that logs a crash and restarts the
duty with backoff; nothing here holds state that a restart (or another executor replica) could
not rebuild from the database. When ``stop`` is set: waiting Lease calls answer at once, the
transport drains for a few seconds, HTTP deliveries in flight get a short grace and the rest
are handed back unspent, then the reaper stops.

The worker transport (the gRPC server of ``app.rpc.server``) sits above this tier: it calls into
``Outcomes`` and the stores, so this module must not import it. ``serve`` takes it as a
``WorkerTransport`` instead, and the composition root (``kairos executor`` in ``app.cli``, the one
layer that sees both) passes ``app.rpc.server.GrpcTransport``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from app import observability
from app.config import Settings
from app.duties import supervise
from app.executor import signing
from app.executor.batching import Outcomes
from app.executor.delivery_egress import policy_for
from app.executor.depth import ReadyDepth
from app.executor.http_config import HttpPoolConfig
from app.executor.http_pool import HttpPool
from app.executor.reaper import LeaseReaper
from app.executor.retention import RetentionConfig, RetentionPruner, objects_for
from app.store import Database, oidc_keys, sealing
from app.store.payloads import PayloadStore

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 3.0
# kairos_breaker_state's values, and the most origins it reports (the most broken first).
BREAKER_LEVELS = {"closed": 0, "half-open": 1, "open": 2}
BREAKER_ORIGINS_MAX = 200


def breaker_readings(pool: HttpPool) -> list[tuple[float, dict[str, str]]]:
    """kairos_breaker_state per (tenant, origin) circuit the pool tracks (those with recent failures)."""
    levels = sorted(
        ((BREAKER_LEVELS[state], str(tenant), origin) for (tenant, origin), state in pool.breakers.states()),
        reverse=True,
    )
    return [
        (float(level), {"origin": origin, "tenant": tenant}) for level, tenant, origin in levels[:BREAKER_ORIGINS_MAX]
    ]


class WorkerTransport(Protocol):
    """What the executor needs of the transport its workers lease and report through."""

    async def start(self, db: Database, outcomes: Outcomes) -> str:
        """Start serving; returns the address it listens on."""

    def notify_ready(self, count: int) -> None:
        """``count`` executions became ready: wake waiting Lease calls."""

    async def wait_for_termination(self) -> None:
        """Return when the transport has stopped serving."""

    async def stop(self, grace_s: float) -> None:
        """Answer waiting Lease calls now and drain calls in flight for up to ``grace_s``."""


async def serve(settings: Settings, db: Database, stop: asyncio.Event, transport: WorkerTransport) -> None:
    await signing.prepare(settings, db)  # HTTP deliveries are signed: the secret key must be there
    # Identity tokens (target.auth) need a signing key: the first is made here if no process made it yet.
    keyring = sealing.keyring_for(settings)
    await db.transaction(lambda tx: tx.oidc_keys.ensure(oidc_keys.algorithm_of(settings.oidc_key_algorithm), keyring))
    outcomes = Outcomes(db)
    addr = await transport.start(db, outcomes)
    pool = HttpPool(
        db,
        outcomes,
        HttpPoolConfig(
            concurrency=settings.http_concurrency,
            lease_s=settings.http_lease_s,
            per_tenant=settings.http_per_tenant or None,
            per_origin=settings.http_per_origin,
        ),
        egress=policy_for(settings),
        payloads=PayloadStore.from_settings(settings),
    )

    def ready(count: int) -> None:
        transport.notify_ready(count)
        pool.wake.set()

    reaper = LeaseReaper(db, on_ready=ready)
    pruner = RetentionPruner(db, objects_for(settings), RetentionConfig.from_settings(settings))
    depth = ReadyDepth(db)
    unwatch = [
        observability.ready_queue_depth.watch(depth.readings),
        observability.breaker_state.watch(lambda: breaker_readings(pool)),
    ]
    tasks = [
        asyncio.create_task(supervise("http-pool", lambda: pool.run(stop), stop), name="http-pool"),
        asyncio.create_task(supervise("lease-reaper", lambda: reaper.run(stop), stop), name="lease-reaper"),
        asyncio.create_task(transport.wait_for_termination(), name="worker-transport"),
        asyncio.create_task(supervise("ready-depth", lambda: depth.run(stop), stop), name="ready-depth"),
        asyncio.create_task(supervise("retention-pruner", lambda: pruner.run(stop), stop), name="retention-pruner"),
    ]
    log.info("executor serving", extra={"transport": addr, "http_concurrency": settings.http_concurrency})
    stopped = asyncio.create_task(stop.wait(), name="stop")
    try:
        done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if stopped not in done:
            crashed = [t.get_name() for t in done]
            log.error("executor duty ended unexpectedly; shutting down", extra={"duties": crashed})
            stop.set()
    finally:
        log.info("executor stopping")
        stop.set()
        await transport.stop(SHUTDOWN_GRACE_S)
        await asyncio.wait(tasks[:2], timeout=SHUTDOWN_GRACE_S)  # the pool stops leasing first
        await pool.close(grace_s=SHUTDOWN_GRACE_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, stopped, return_exceptions=True)
        for remove in unwatch:
            remove()
