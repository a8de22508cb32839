"""``kairos executor``: the gRPC worker protocol, the built-in HTTP-target pool and the lease reaper.

Each duty is a named asyncio task under a small supervisor that logs a crash and restarts the
duty with backoff; nothing here holds state that a restart (or another executor replica) could
not rebuild from the database. When ``stop`` is set: waiting Lease calls answer at once, the
gRPC server drains for a few seconds, HTTP deliveries in flight get a short grace and the rest
are handed back unspent, then the reaper stops.
"""

from __future__ import annotations

import asyncio
import logging

from app.config import Settings
from app.duties import supervise
from app.executor.batching import Outcomes
from app.executor.egress import EgressPolicy
from app.executor.http_pool import HttpPool, HttpPoolConfig
from app.executor.reaper import LeaseReaper
from app.rpc import server as rpc_server
from app.store.db import Database

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 3.0


async def serve(settings: Settings, db: Database, stop: asyncio.Event) -> None:
    outcomes = Outcomes(db)
    server, servicer, port = await rpc_server.start(db, outcomes, settings.grpc_host, settings.grpc_port)
    pool = HttpPool(db, outcomes, HttpPoolConfig(concurrency=settings.http_concurrency),
                    egress=EgressPolicy.from_allow_list(settings.http_egress_allow))

    def ready(count: int) -> None:
        servicer.notify_ready(count)
        pool.wake.set()

    reaper = LeaseReaper(db, on_ready=ready)
    tasks = [
        asyncio.create_task(supervise("http-pool", lambda: pool.run(stop), stop), name="http-pool"),
        asyncio.create_task(supervise("lease-reaper", lambda: reaper.run(stop), stop), name="lease-reaper"),
        asyncio.create_task(server.wait_for_termination(), name="grpc-server"),
    ]
    log.info("executor serving", extra={"grpc": f"{settings.grpc_host}:{port}",
                                        "http_concurrency": settings.http_concurrency})
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
        await rpc_server.stop(server, servicer, SHUTDOWN_GRACE_S)
        await asyncio.wait(tasks[:2], timeout=SHUTDOWN_GRACE_S)  # the pool stops leasing first
        await pool.close(grace_s=SHUTDOWN_GRACE_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, stopped, return_exceptions=True)
