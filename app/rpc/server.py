"""The grpc.aio server hosting the Worker service."""

from __future__ import annotations

import logging

import grpc

from app.executor.batching import Outcomes
from app.rpc.servicer import ServicerConfig, WorkerServicer
from app.store.db import Database
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
