"""One tenant's slow or failing HTTP targets never delay another tenant's deliveries, and an
open circuit breaker spends no attempts on the deliveries already leased for it.

Real local HTTP servers (one answers only when the test lets it, one always fails), the pool's own
loop against the test database.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import text

from app.executor.batching import Outcomes
from app.executor.breaker import BreakerConfig
from app.executor.delivery_egress import EgressPolicy
from app.executor.http_pool import HTTP_QUEUE, HttpPool, HttpPoolConfig
from app.store.db import Database
from tests import factories as tf
from tests.support.polling import poll

LOCAL = EgressPolicy.from_allow_list(["127.0.0.1"])


@dataclass
class Server:
    """A local endpoint answering ``status``; while ``gate`` is clear every request waits for it."""

    status: int = 200
    delay_s: float = 0.0  # how long the target takes to answer, once the gate is open
    gate: threading.Event = field(default_factory=threading.Event)
    received: int = 0
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def url(self, path: str = "hook") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"


@contextmanager
def server(status: int = 200, *, open_gate: bool = True, delay_s: float = 0.0) -> Iterator[Server]:
    state = Server(status, delay_s)
    if open_gate:
        state.gate.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                state.received += 1
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
            state.gate.wait(30)
            if state.delay_s:
                time.sleep(state.delay_s)
            with state.lock:
                state.in_flight -= 1
            self.send_response(state.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            with suppress(BrokenPipeError):
                self.wfile.write(b"no")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.gate.set()
        httpd.shutdown()
        httpd.server_close()


async def rows(db: Database, ids) -> list:
    async def read(conn):
        return (
            await conn.execute(
                text(
                    "SELECT execution_id, state, attempt, max_attempts, ready_at, error "
                    "FROM executions WHERE execution_id = ANY(:ids)"
                ),
                {"ids": list(ids)},
            )
        ).all()

    return await tf.raw(db, read)


async def test_one_tenants_slow_targets_never_delay_anothers_deliveries(db: Database) -> None:
    """Before: A's leased deliveries waiting for its two slow origins held all 8 slots of the executor, so
    B's deliveries to a third origin waited until A's targets answered. Now a waiting delivery holds no
    slot, a tenant holds at most half the slots, and a tenant with deliveries waiting is leased no more."""
    a, b = await tf.tenant(db), await tf.tenant(db)
    with server(open_gate=False) as slow1, server(open_gate=False) as slow2, server() as fast:
        a_ids = []
        for target in (slow1, slow2):
            job = await tf.job(db, a.tenant_id, queue=HTTP_QUEUE, target_ref=target.url(), timeout_s=60)
            a_ids += await tf.ready_executions(db, job, 20)
        pool = HttpPool(
            db, Outcomes(db), HttpPoolConfig(concurrency=8, per_origin=4, poll_interval_s=0.05), egress=LOCAL
        )
        stop = asyncio.Event()
        loop = asyncio.create_task(pool.run(stop))
        try:
            # A's requests reach its slow targets and hang there.
            await poll(
                lambda: asyncio.sleep(0, slow1.in_flight + slow2.in_flight >= 4),
                timeout_s=10,
                what="A's requests in flight",
            )
            job_b = await tf.job(db, b.tenant_id, queue=HTTP_QUEUE, target_ref=fast.url())
            b_ids = await tf.ready_executions(db, job_b, 6)
            pool.wake.set()
            started = time.monotonic()

            async def b_done() -> bool:
                return all(r.state == "succeeded" for r in await rows(db, b_ids))

            await poll(b_done, timeout_s=5, interval_s=0.05, what="B's deliveries while A's targets hang")
            b_latency = time.monotonic() - started
            assert slow1.in_flight + slow2.in_flight <= 4  # A never held more than its half of the slots
            assert not slow1.gate.is_set()  # A's targets have answered nothing yet
            # A's backlog stayed in the queue: leased no further than what waits for its slots.
            waiting = [r for r in await rows(db, a_ids) if r.attempt > 0]
            assert len(waiting) <= 4 + 8 + 4, len(waiting)
            slow1.gate.set()
            slow2.gate.set()

            async def a_done() -> bool:
                return all(r.state == "succeeded" for r in await rows(db, a_ids))

            await poll(a_done, timeout_s=20, interval_s=0.1, what="A's deliveries once its targets answer")
        finally:
            stop.set()
            await loop
            await pool.close()
    # Waiting spent nothing: every delivery of A and B ran on its first attempt.
    assert {r.attempt for r in await rows(db, a_ids + b_ids)} == {1}
    assert max(slow1.most_in_flight, slow2.most_in_flight) <= 4
    assert b_latency < 5
    print(f"B delivered {b_latency:.2f}s after its jobs were ready, A's targets hanging")


async def test_an_open_breaker_defers_the_leased_batch_without_spending_attempts(db: Database) -> None:
    """Before: the 16 deliveries leased together were all sent to the failing target (and, with maxAttempts 1,
    all dead-lettered) although the circuit opened after 3. Now a failing circuit narrows, and once open
    nothing more is sent: the rest are handed back, their attempt refunded."""
    t = await tf.tenant(db)
    with server(503) as failing:
        job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=failing.url(), max_attempts=1)
        ids = await tf.ready_executions(db, job, 40)
        pool = HttpPool(
            db,
            Outcomes(db),
            HttpPoolConfig(
                concurrency=16, per_origin=4, batch=16, breaker=BreakerConfig(failure_threshold=3, cooldown_s=60)
            ),
            egress=LOCAL,
        )
        try:
            for _ in range(4):  # the first batch opens the circuit; later ones find nothing due, or defer it
                await pool.run_once()
        finally:
            await pool.close()
        circuit = (str(t.tenant_id), f"http://127.0.0.1:{failing.port}")
        assert pool.breakers.state(circuit) == "open"
        assert failing.received <= 4  # what was in flight when the outage began: one circuit's slots
    got = await rows(db, ids)
    dead = [r for r in got if r.state == "dead"]
    # Only the failures that revealed the outage spent their attempt (the threshold's 3); a request still in
    # flight when the circuit opened was deferred like the rest, its attempt refunded.
    assert len(dead) == 3 <= failing.received
    deferred = [r for r in got if r.state == "ready" and r.attempt > 0]
    assert deferred, "the rest of the leased batch was handed back"
    # Deferred, not spent: each still has its whole budget (the refunded attempt), due after the cool-down.
    assert all(r.max_attempts - r.attempt == 1 for r in deferred)
    never = [r for r in got if r.state == "ready" and r.attempt == 0]
    assert len(dead) + len(deferred) + len(never) == len(ids)
    ready_at = min(r.ready_at for r in deferred)

    async def seconds_until(at) -> float:
        async def read(conn):
            return (
                await conn.execute(text("SELECT EXTRACT(EPOCH FROM CAST(:at AS TIMESTAMPTZ) - now())"), {"at": at})
            ).scalar_one()

        return float(await tf.raw(db, read))

    assert await seconds_until(ready_at) > 50


@pytest.mark.parametrize("threshold", [1, 3])
async def test_a_failing_circuit_narrows_before_it_opens(threshold: int) -> None:
    from uuid import uuid4

    from app.executor.breaker import Breakers

    now = [0.0]
    breakers = Breakers(BreakerConfig(failure_threshold=threshold, cooldown_s=10), clock=lambda: now[0])
    key = (uuid4(), "http://example.com:80")
    assert breakers.limit(key, 16) == 16
    for failures in range(1, threshold):
        assert breakers.record_failure(key) is False
        assert breakers.limit(key, 16) == max(1, threshold - failures)
    assert breakers.record_failure(key) is True
    assert breakers.limit(key, 16) == 0 and breakers.open_for(key) == 10
    now[0] = 10.0
    assert breakers.state(key) == "half-open" and breakers.limit(key, 16) == 1 and breakers.open_for(key) is None
    breakers.sending(key)  # the probe
    assert breakers.record_failure(key) is True and breakers.open_for(key) == 10  # re-opened
    now[0] = 20.0
    breakers.sending(key)
    breakers.record_success(key)
    assert breakers.state(key) == "closed" and breakers.limit(key, 16) == 16
