"""What a webhook's receiver sees: when the request leaves (its attempt's start), which headers it carries,
what happens to a request that cannot be built, Retry-After, and two executors sharing one queue."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import text

from app.executor.batching import Outcomes
from app.executor.http_pool import HTTP_QUEUE, HttpPool, HttpPoolConfig
from app.store.db import Database
from tests import factories as tf
from tests.integration.test_http_isolation import LOCAL, rows
from tests.support.polling import poll


@dataclass
class Receiver:
    """A local endpoint answering ``status`` (with ``headers``) after ``delay_s``; records every request's
    header lines as sent (duplicates kept) and its arrival time."""

    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    requests: list[list[tuple[str, str]]] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def by_execution(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for lines in self.requests:
            eid = next(v for k, v in lines if k.lower() == "kairos-execution-id")
            counts[eid] = counts.get(eid, 0) + 1
        return counts


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            arrived = time.time()
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                state.requests.append(list(self.headers.items()))
                state.arrived.append(arrived)
                status, delay, extra = state.status, state.delay_s, dict(state.headers)
            if delay:
                time.sleep(delay)
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


async def attempts_of(db: Database, ids) -> list:
    async def read(conn):
        return (
            await conn.execute(
                text(
                    "SELECT a.execution_id, a.attempt, a.leased_at, a.sent_at, a.outcome, "
                    "       extract(epoch FROM a.sent_at) AS sent_s "
                    "FROM attempts AS a WHERE a.execution_id = ANY(:ids) ORDER BY a.sent_at"
                ),
                {"ids": list(ids)},
            )
        ).all()

    return await tf.raw(db, read)


async def run_pool(db: Database, pool: HttpPool, ids, *, timeout_s: float = 20) -> None:
    stop = asyncio.Event()
    loop = asyncio.create_task(pool.run(stop))
    try:

        async def done() -> bool:
            return all(r.state in ("succeeded", "dead") for r in await rows(db, ids))

        await poll(done, timeout_s=timeout_s, interval_s=0.05, what="every delivery settled")
    finally:
        stop.set()
        await loop
        await pool.close()


async def test_a_delivery_starts_when_its_request_is_sent_not_when_it_is_leased(
    db: Database, receiver: Receiver
) -> None:
    """Three deliveries to an origin that takes one at a time, 0.4 s each: all three are leased at once, the
    third request leaves about 0.8 s later. Its attempt's sent_at (and the job's firstStartedAt) is that
    moment, within a few milliseconds of the receipt; the lease time is not."""
    t = await tf.tenant(db)
    receiver.delay_s = 0.4
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=receiver.url)
    ids = await tf.ready_executions(db, job, 3)
    pool = HttpPool(db, Outcomes(db), HttpPoolConfig(per_origin=1, poll_interval_s=0.05), egress=LOCAL)
    await run_pool(db, pool, ids)
    got = await attempts_of(db, ids)
    assert [a.outcome for a in got] == ["succeeded"] * 3
    assert all(a.sent_at is not None and a.sent_at >= a.leased_at for a in got)
    last = got[-1]
    assert (last.sent_at - last.leased_at).total_seconds() > 0.6  # it waited for its slot, unstarted
    assert abs(float(last.sent_s) - max(receiver.arrived)) < 0.2  # sent_at is when it was received
    page = await db.transaction(lambda c: c.jobs.executions_page(t.tenant_id, job, before=None, limit=10))
    first_started = {str(e.execution_id): e.first_started_at for e in page}
    assert first_started[str(last.execution_id)] == last.sent_at


async def test_reserved_headers_are_kairos_own_in_any_case(db: Database, receiver: Receiver) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=receiver.url)

    async def shape(conn) -> None:
        await conn.execute(
            text("UPDATE jobs SET http_headers = CAST(:h AS JSONB) WHERE job_id = :j"),
            {
                "h": json.dumps(
                    {"user-agent": "tenant/9", "ACCEPT-ENCODING": "gzip", "kairos-attempt": "7", "X-Team": "payments"}
                ),
                "j": job,
            },
        )

    await tf.raw(db, shape)
    ids = await tf.ready_executions(db, job)
    await run_pool(db, HttpPool(db, Outcomes(db), HttpPoolConfig(poll_interval_s=0.05), egress=LOCAL), ids)
    [lines] = receiver.requests
    named = [(k.lower(), v) for k, v in lines]
    for name, value in (("user-agent", "Kairos/1"), ("accept-encoding", "identity"), ("kairos-attempt", "1")):
        assert [v for k, v in named if k == name] == [value], named
    assert ("x-team", "payments") in named


@pytest.mark.parametrize("value", ["café", "a\u2028b", "a\x85b", "a\x01b", "a\x7fb", "a\r\nX-Injected: 1"])
async def test_a_header_that_cannot_be_sent_fails_its_attempt_at_once(
    db: Database, receiver: Receiver, value: str
) -> None:
    """Written past the API's check (an older row): the delivery dead-letters at once, saying why, and sends
    nothing; never a lease that lapses attempt after attempt."""
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=receiver.url, max_attempts=5)

    async def shape(conn) -> None:
        await conn.execute(
            text("UPDATE jobs SET http_headers = CAST(:h AS JSONB) WHERE job_id = :j"),
            {"h": json.dumps({"X-Bad": value}), "j": job},
        )

    await tf.raw(db, shape)
    ids = await tf.ready_executions(db, job)
    started = time.monotonic()
    await run_pool(db, HttpPool(db, Outcomes(db), HttpPoolConfig(poll_interval_s=0.05), egress=LOCAL), ids)
    [row] = await rows(db, ids)
    assert row.state == "dead" and row.attempt == 1
    assert "cannot be sent" in row.error
    assert receiver.requests == []
    assert time.monotonic() - started < 10  # not a lease lapse (15 s)


async def test_retry_after_decides_when_the_retry_comes(db: Database, receiver: Receiver) -> None:
    t = await tf.tenant(db)
    receiver.status, receiver.headers = 503, {"Retry-After": "120"}
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=receiver.url, backoff_s=1, max_backoff_s=2)
    ids = await tf.ready_executions(db, job)
    pool = HttpPool(db, Outcomes(db), HttpPoolConfig(), egress=LOCAL)
    try:
        await pool.run_once()
    finally:
        await pool.close()

    async def due_in(conn):
        return (
            await conn.execute(
                text("SELECT extract(epoch FROM ready_at - now()) FROM executions WHERE execution_id = :e"),
                {"e": ids[0]},
            )
        ).scalar_one()

    assert 100 < float(await tf.raw(db, due_in)) <= 121
    assert pool.limit_of((str(t.tenant_id), f"http://127.0.0.1:{receiver.port}")) == 16  # halved from 32


async def test_two_executors_share_one_queue_and_deliver_each_once(db: Database, receiver: Receiver) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=receiver.url)
    ids = await tf.ready_executions(db, job, 300)
    config = HttpPoolConfig(batch=16, concurrency=32, poll_interval_s=0.05)
    pools = [
        HttpPool(db, Outcomes(db), HttpPoolConfig(**{**config.__dict__, "worker_id": f"executor-{i}"}), egress=LOCAL)
        for i in range(2)
    ]
    stop = asyncio.Event()
    loops = [asyncio.create_task(p.run(stop)) for p in pools]
    try:

        async def done() -> bool:
            return all(r.state == "succeeded" for r in await rows(db, ids))

        await poll(done, timeout_s=60, interval_s=0.1, what="300 deliveries by two executors")
    finally:
        stop.set()
        await asyncio.gather(*loops)
        for p in pools:
            await p.close()
    counts = receiver.by_execution()
    assert len(counts) == 300 and set(counts.values()) == {1}
    owners = {a.attempt for a in await attempts_of(db, ids)}
    assert owners == {1}


async def test_the_pool_leases_again_as_its_waiting_deliveries_drain_not_on_a_poll(
    db: Database, receiver: Receiver
) -> None:
    """A tenant's backlog larger than what may wait for its origin's slots: the pool stops leasing it, and
    leases more as those deliveries leave. With a 60 s poll interval, only that refill can finish the work
    within the test's bound."""
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=receiver.url)
    ids = await tf.ready_executions(db, job, 120)
    pool = HttpPool(
        db, Outcomes(db), HttpPoolConfig(per_origin=2, per_origin_start=2, batch=16, poll_interval_s=60), egress=LOCAL
    )
    started = time.monotonic()
    await run_pool(db, pool, ids, timeout_s=30)
    assert all(r.state == "succeeded" for r in await rows(db, ids))
    assert time.monotonic() - started < 30
    assert len(receiver.by_execution()) == 120
