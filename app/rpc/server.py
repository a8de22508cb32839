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
from app.store.payloads import PayloadStore
from kairos_sdk._proto import worker_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_OPTIONS = [
    # gRPC sets SO_REUSEPORT by default, so a second executor on a taken port would silently share it
    # (and its workers) with the first; without it, a taken port fails the bind.
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


# `kairos up` calls this (raw bytes, outside the Worker service) to know that the port it probes is
# served by its own executor: the answer is KAIROS_SUPERVISOR_TOKEN. Registered only when that is set.
SUPERVISOR_TOKEN_SERVICE, SUPERVISOR_TOKEN_METHOD = "kairos.internal.Supervisor", "Token"


def _supervisor_token_handler(token: str) -> grpc.GenericRpcHandler:
    async def answer(_request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return token.encode()

    return grpc.method_handlers_generic_handler(
        SUPERVISOR_TOKEN_SERVICE, {SUPERVISOR_TOKEN_METHOD: grpc.unary_unary_rpc_method_handler(answer)}
    )


async def supervisor_token(addr: str, timeout_s: float) -> str | None:
    """The supervisor token the executor at ``addr`` answers; None when nothing there answers one."""
    async with grpc.aio.insecure_channel(addr) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{SUPERVISOR_TOKEN_SERVICE}/{SUPERVISOR_TOKEN_METHOD}"
        )
        try:
            answer: bytes = await call(b"", timeout=timeout_s)
            return answer.decode()
        except grpc.aio.AioRpcError:
            return None


async def start(
    db: Database,
    outcomes: Outcomes,
    host: str,
    port: int,
    config: ServicerConfig = ServicerConfig(),
    supervisor_token: str = "",
    payloads: PayloadStore | None = None,
) -> tuple[grpc.aio.Server, WorkerServicer, int]:
    """Start serving; returns the server, its servicer and the bound port (``port`` 0 picks one)."""
    server = grpc.aio.server(options=_OPTIONS)
    servicer = WorkerServicer(db, outcomes, config, payloads)
    pb_grpc.add_WorkerServicer_to_server(servicer, server)
    if supervisor_token:
        server.add_generic_rpc_handlers((_supervisor_token_handler(supervisor_token),))
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpcio raises instead of returning 0 when the bind fails
        bound = 0
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}: in use, or not an address of this host")
    await server.start()
    log.info("grpc listening", extra={"addr": f"{host}:{bound}"})
    return server, servicer, bound


async def stop(server: grpc.aio.Server, servicer: WorkerServicer, grace_s: float = 3.0) -> None:
    servicer.stopping.set()  # waiting Lease calls answer now
    await server.stop(grace_s)


class GrpcTransport:
    """The Worker service on ``host:port`` (``port`` 0 picks one), started and stopped by the executor."""

    def __init__(
        self,
        host: str,
        port: int,
        config: ServicerConfig = ServicerConfig(),
        supervisor_token: str = "",
        payloads: PayloadStore | None = None,
    ) -> None:
        self.host, self.port, self.config = host, port, config
        self.supervisor_token = supervisor_token
        self.payloads = payloads
        self.server: grpc.aio.Server | None = None
        self.servicer: WorkerServicer | None = None

    async def start(self, db: Database, outcomes: Outcomes) -> str:
        self.server, self.servicer, bound = await start(
            db, outcomes, self.host, self.port, self.config, self.supervisor_token, self.payloads
        )
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
