"""The gRPC server's port: a taken one fails the bind (never shared), and the supervisor token answers."""

from __future__ import annotations

import pytest

from app.executor.batching import Outcomes
from app.rpc import server as rpc_server
from app.store.db import Database


async def test_a_second_server_on_a_taken_port_fails_instead_of_sharing_it(db: Database, addr: str) -> None:
    host, port = addr.rsplit(":", 1)
    # grpcio's default SO_REUSEPORT would let this bind succeed and split the workers between both servers.
    with pytest.raises(OSError, match=f"cannot listen on {host}:{port}"):
        await rpc_server.start(db, Outcomes(db), host, int(port))


async def test_the_supervisor_token_answers_only_when_set(db: Database, addr: str) -> None:
    assert await rpc_server.supervisor_token(addr, timeout_s=2) is None  # the fixture's server has none
    server, servicer, port = await rpc_server.start(db, Outcomes(db), "127.0.0.1", 0, supervisor_token="run-1")
    try:
        assert await rpc_server.supervisor_token(f"127.0.0.1:{port}", timeout_s=2) == "run-1"
    finally:
        await rpc_server.stop(server, servicer, 0.5)
