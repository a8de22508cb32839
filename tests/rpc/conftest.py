"""A real gRPC worker server on a free port, in-process, over the test's database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.executor.batching import Outcomes
from app.rpc import server as rpc_server
from app.rpc.servicer import ServicerConfig
from app.store.db import Database


@pytest.fixture
async def addr(db: Database) -> AsyncIterator[str]:
    server, servicer, port = await rpc_server.start(
        db, Outcomes(db), "127.0.0.1", 0, ServicerConfig(poll_interval_s=0.05)
    )
    yield f"127.0.0.1:{port}"
    await rpc_server.stop(server, servicer, 0.5)
