"""Failed authentications on the gRPC worker protocol are throttled per client address as on the REST
API (RESOURCE_EXHAUSTED with a retry hint; a valid key still passes), and unknown keys are cached
briefly, so repeating one costs the database one lookup."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from app.executor.batching import Outcomes
from app.rpc import server as rpc_server
from app.rpc.servicer import ServicerConfig, WorkerServicer
from app.store.db import Database
from kairos_sdk import WorkerClient
from tests import factories as tf

LIMIT = 3


@pytest.fixture
async def served(db: Database) -> AsyncIterator[tuple[str, WorkerServicer]]:
    server, servicer, port = await rpc_server.start(
        db,
        Outcomes(db),
        "127.0.0.1",
        0,
        ServicerConfig(poll_interval_s=0.05, auth_failure_limit=LIMIT, auth_failure_window_s=600),
    )
    yield f"127.0.0.1:{port}", servicer
    await rpc_server.stop(server, servicer, 0.5)


async def lease_error(addr: str, key: str) -> grpc.aio.AioRpcError:
    async with WorkerClient(addr, key) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.lease("emails", "w", 1)
    return err.value


async def test_after_the_limit_failures_are_resource_exhausted_and_a_valid_key_passes(
    db: Database, served: tuple[str, WorkerServicer]
) -> None:
    addr, servicer = served
    t = await tf.tenant(db)
    codes = [(await lease_error(addr, f"kairos_guess-{i}")).code() for i in range(LIMIT)]
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * LIMIT
    lookups = servicer._keys.lookups
    for key in ("kairos_guess-more", ""):
        err = await lease_error(addr, key)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
        assert "retry after" in err.details()
        retry = dict(err.trailing_metadata() or ())["retry-after"]
        assert 1 <= int(retry) <= 600 // LIMIT
    async with WorkerClient(addr, t.key) as client:  # others' failures never lock a valid key out
        assert await client.lease("emails", "w", 1) == []
    assert servicer._keys.lookups - lookups <= 2


async def test_an_unknown_key_is_looked_up_once_while_its_miss_is_cached(
    db: Database, served: tuple[str, WorkerServicer]
) -> None:
    addr, servicer = served
    before = servicer._keys.lookups
    async with WorkerClient(addr, "kairos_the-same-wrong-key") as client:
        for _ in range(20):
            with pytest.raises(grpc.aio.AioRpcError):
                await client.lease("emails", "w", 1)
    assert servicer._keys.lookups - before == 1
