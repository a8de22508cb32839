"""The grpc.aio server hosting the Worker service.

``GrpcTransport`` is the executor's ``WorkerTransport``: ``kairos executor`` hands it to
``app.executor.service.serve``, so rpc depends on the executor tier and never the other way round.
"""

from __future__ import annotations

import logging

import grpc

from app.executor.batching import Outcomes
from app.rpc.servicer import ServicerConfig, WorkerServicer
from app.store import Database
from kairos_sdk._proto import worker_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


async def start(db: Database, outcomes: Outcomes, host: str, port: int,
                config: ServicerConfig = ServicerConfig()) -> tuple[grpc.aio.Server, WorkerServicer, int]:
    """Start serving; returns the server, its servicer and the bound port (``port`` 0 picks one)."""
    server = grpc.aio.server(options=_OPTIONS)
    servicer = WorkerServicer(db, outcomes, config)
    pb_grpc.add_WorkerServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    log.info("grpc listening", extra={"addr": f"{host}:{bound}"})
    return server, servicer, bound


async def stop(server: grpc.aio.Server, servicer: WorkerServicer, grace_s: float = 3.0) -> None:
    servicer.stopping.set()  # waiting Lease calls answer now
    await server.stop(grace_s)


class GrpcTransport:
    """The Worker service on ``host:port`` (``port`` 0 picks one), started and stopped by the executor."""

    def __init__(self, host: str, port: int, config: ServicerConfig = ServicerConfig()) -> None:
        self.host, self.port, self.config = host, port, config
        self.server: grpc.aio.Server | None = None
        self.servicer: WorkerServicer | None = None

    async def start(self, db: Database, outcomes: Outcomes) -> str:
        self.server, self.servicer, bound = await start(db, outcomes, self.host, self.port, self.config)
        return f"{self.host}:{bound}"

    def notify_ready(self, count: int) -> None:
        if self.servicer is not None:
            self.servicer.notify_ready(count)

    async def wait_for_termination(self) -> None:
        if self.server is not None:
            await self.server.wait_for_termination()

    async def stop(self, grace_s: float) -> None:
        if self.server is not None and self.servicer is not None:
            await stop(self.server, self.servicer, grace_s)
