"""The ``served`` fixture: a fake executor on a free local port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from fake_executor import FakeExecutor, Served

from kairos_sdk._proto import worker_pb2_grpc as pb_grpc


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    executor = FakeExecutor()
    server = grpc.aio.server()
    pb_grpc.add_WorkerServicer_to_server(executor, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield Served(executor, f"127.0.0.1:{port}")
    await server.stop(0.2)
