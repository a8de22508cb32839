"""The built-in HTTP-target pool against a real local HTTP server that fails on demand."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.errors import EgressRefused
from app.executor.batching import Outcomes
from app.executor.breaker import BreakerConfig
from app.executor.delivery_egress import EgressPolicy, resolve
from app.executor.http_pool import HTTP_QUEUE, HttpPool, HttpPoolConfig
from app.executor.http_send import Answer, Origin
from app.store.db import Database
from kairos_sdk.signature import verify
from tests import factories as tf
from tests.support.polling import poll

LOCAL = EgressPolicy.from_allow_list(["127.0.0.1"])


@dataclass
class Target:
    """A local endpoint: answers ``status`` (or sleeps ``delay_s`` first) and records every request."""

    status: int = 200
    delay_s: float = 0.0
    requests: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture
def target() -> Iterator[Target]:
    state = Target()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                state.requests.append({"headers": dict(self.headers), "body": body, "method": self.command})
                status, delay = state.status, state.delay_s
            if delay:
                time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            with contextlib.suppress(BrokenPipeError):  # the client timed out first
                self.wfile.write(b"answer %d" % status)

        do_PUT = do_PATCH = do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@dataclass
class Sent:
    method: str
    url: str
    headers: dict[str, str]


class Recorder:
    """A sender that records each request and answers 200 without any network (the pool's Sender seam)."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    async def __call__(
        self, method: str, origin: Origin, path: str, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> Answer:
        self.sent.append(Sent(method, origin.url(path), headers))
        return Answer(200, None, None, b"")

    async def close(self) -> None:
        pass


def make_pool(db: Database, **kwargs) -> HttpPool:
    breaker = kwargs.pop("breaker", BreakerConfig())
    egress = kwargs.pop("egress", LOCAL)
    transport = kwargs.pop("transport", None)
    return HttpPool(db, Outcomes(db), HttpPoolConfig(breaker=breaker, **kwargs), egress=egress, transport=transport)


async def execution(db: Database, eid):
    from sqlalchemy import text  # assertions read the row directly

    async def read(conn):
        return (await conn.execute(text("SELECT * FROM executions WHERE execution_id = :e"), {"e": eid})).first()

    return await tf.raw(db, read)


async def test_delivery_is_signed_and_completes(db: Database, target: Target) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url, payload={"order": 42})
    [eid] = await tf.ready_executions(db, job)
    pool = make_pool(db)
    try:
        [leased] = await pool.run_once()
    finally:
        await pool.close()
    assert leased.execution_id == str(eid)
    [req] = target.requests
    h = {k.lower(): v for k, v in req["headers"].items()}
    assert json.loads(req["body"]) == {"order": 42}
    assert verify(t.signing_secret, h["kairos-signature"], req["body"])
    assert not verify("another-secret", h["kairos-signature"], req["body"])
    assert not verify(t.signing_secret, h["kairos-signature"], req["body"] + b" ")
    assert h["idempotency-key"] == leased.idempotency_key and h["idempotency-key"].startswith(f"{job}:")
    assert h["kairos-job-id"] == str(job) and h["kairos-execution-id"] == str(eid)
    assert h["kairos-attempt"] == "1" and h["kairos-scheduled-for"].endswith("Z")
    assert h["host"] == f"127.0.0.1:{target.port}"
    row = await execution(db, eid)
    assert row.state == "succeeded" and row.result == {"status": 200}


@pytest.mark.parametrize("method", ["PUT", "GET"])
async def test_a_job_chooses_the_method_and_adds_static_headers(db: Database, target: Target, method: str) -> None:
    from sqlalchemy import text

    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url, payload={"order": 7})

    async def shape(conn) -> None:
        await conn.execute(
            text("UPDATE jobs SET http_method = :m, http_headers = CAST(:h AS JSONB) WHERE job_id = :j"),
            {"m": method, "h": json.dumps({"X-Team": "payments"}), "j": job},
        )

    await tf.raw(db, shape)
    [eid] = await tf.ready_executions(db, job)
    pool = make_pool(db)
    try:
        await pool.run_once()
    finally:
        await pool.close()
    [req] = target.requests
    h = {k.lower(): v for k, v in req["headers"].items()}
    assert req["method"] == method and h["x-team"] == "payments"
    assert req["body"] == (b"" if method == "GET" else b'{"order":7}')
    assert verify(t.signing_secret, h["kairos-signature"], req["body"])
    assert (await execution(db, eid)).state == "succeeded"


@pytest.mark.parametrize(
    ("status", "state"),
    [(500, "ready"), (503, "ready"), (429, "ready"), (408, "ready"), (404, "dead"), (400, "dead"), (410, "dead")],
)
async def test_status_decides_retry_or_dead_letter(db: Database, target: Target, status: int, state: str) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url, max_attempts=5)
    [eid] = await tf.ready_executions(db, job)
    target.status = status
    pool = make_pool(db)
    try:
        await pool.run_once()
    finally:
        await pool.close()
    row = await execution(db, eid)
    assert row.state == state and row.attempt == 1
    assert row.error.startswith(f"HTTP {status}")


async def test_timeouts_and_connection_errors_retry(db: Database, target: Target) -> None:
    t = await tf.tenant(db)
    slow = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url, timeout_s=1)
    closed = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref="http://127.0.0.1:9/nothing-listens")
    [e_slow] = await tf.ready_executions(db, slow)
    [e_closed] = await tf.ready_executions(db, closed)
    target.delay_s = 1.5
    pool = make_pool(db)
    try:
        await pool.run_once()
    finally:
        await pool.close()
    slow_row, closed_row = await execution(db, e_slow), await execution(db, e_closed)
    assert (slow_row.state, closed_row.state) == ("ready", "ready")
    assert "timed out" in slow_row.error and "connection error" in closed_row.error


async def test_egress_policy_refuses_metadata_and_private_addresses_without_sending(db: Database) -> None:
    transport = Recorder()
    sent = transport.sent
    t = await tf.tenant(db)

    async def deliver(urls: list[str], policy: EgressPolicy) -> list:
        ids = []
        for url in urls:
            job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=url)
            ids += await tf.ready_executions(db, job)
        pool = make_pool(db, transport=transport, egress=policy)
        try:
            await pool.run_once()
        finally:
            await pool.close()
        return [await execution(db, eid) for eid in ids]

    metadata, private, loopback = await deliver(
        ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1:8080/hook", "http://localhost:1/x"],
        EgressPolicy(),
    )
    assert sent == []  # nothing left the process
    assert metadata.state == "dead" and "metadata" in metadata.error
    assert private.state == "dead" and "private" in private.error
    # A name: the tenant learns it was refused, never the address it resolved to.
    assert loopback.state == "dead" and loopback.error == "target refused by egress policy"
    # An allow-list opens private ranges, but never the metadata address.
    metadata, private = await deliver(
        ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1:8080/hook"],
        EgressPolicy.from_allow_list(["10.0.0.0/8", "169.254.0.0/16"]),
    )
    assert metadata.state == "dead" and "metadata" in metadata.error
    assert private.state == "succeeded"
    assert [r.url for r in sent] == ["http://10.0.0.1:8080/hook"]


async def test_egress_policy_unit() -> None:
    policy = EgressPolicy()
    for host in (
        "169.254.169.254",
        "10.0.0.1",
        "127.0.0.1",
        "192.168.1.1",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "100.64.0.1",
        "0.0.0.0",
        "::ffff:10.0.0.1",
    ):
        with pytest.raises(EgressRefused):
            await resolve(policy, host, 80)
    assert str(await resolve(policy, "93.184.215.14", 80)) == "93.184.215.14"
    assert str(await resolve(LOCAL, "127.0.0.1", 80)) == "127.0.0.1"
    with pytest.raises(EgressRefused):
        await resolve(EgressPolicy.from_allow_list(["169.254.0.0/16"]), "169.254.169.254", 80)


async def test_circuit_breaker_opens_defers_without_spending_attempts_then_closes(db: Database, target: Target) -> None:
    t = await tf.tenant(db)
    job = await tf.job(
        db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url, max_attempts=3, backoff_s=0, max_backoff_s=0
    )
    ids = await tf.ready_executions(db, job, 6)
    target.status = 503
    pool = make_pool(db, concurrency=1, batch=1, breaker=BreakerConfig(failure_threshold=3, cooldown_s=1.0))
    try:
        for _ in range(3):  # three consecutive failures open the circuit
            await pool.run_once()
        assert len(target.requests) == 3
        circuit = (str(t.tenant_id), f"http://127.0.0.1:{target.port}")
        assert pool.breakers.state(circuit) == "open"
        # While open, leased executions are handed back unsent, their attempt refunded.
        deferred = await pool.run_once()
        assert len(deferred) == 1 and len(target.requests) == 3
        row = await execution(db, deferred[0].execution_id)
        assert row.state == "ready" and row.max_attempts == 4 and row.ready_at > row.dispatched_at
        history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, row.execution_id))
        assert all(a.attempt != row.attempt for a in history)
        # The endpoint recovers; after the cool-down a probe closes the circuit and work flows.
        target.status = 200

        async def all_succeeded() -> list[str] | None:
            await pool.run_once()
            states = [(await execution(db, eid)).state for eid in ids]
            return states if states.count("succeeded") == len(ids) else None

        states = await poll(all_succeeded, timeout_s=20, interval_s=0.05, what="every execution to succeed")
        assert pool.breakers.state(circuit) == "closed"
        # No execution spent more than the failures it really had: none is dead.
        assert "dead" not in states
    finally:
        await pool.close()


async def test_one_tenants_failing_endpoint_never_opens_anothers_circuit_to_the_same_origin(
    db: Database, target: Target
) -> None:
    """The breaker is keyed on (tenant, origin): keyed on the origin alone, tenant A's 30 failures to a URL
    held tenant B's deliveries to the same origin back by 28 s. A's circuit opens and B's deliveries still go."""
    a, b = await tf.tenant(db), await tf.tenant(db)
    failing = await tf.job(db, a.tenant_id, queue=HTTP_QUEUE, target_ref=f"{target.url}/a", max_attempts=10)
    await tf.ready_executions(db, failing, 3)
    target.status = 503
    pool = make_pool(db, concurrency=1, batch=1, breaker=BreakerConfig(failure_threshold=3, cooldown_s=60.0))
    try:
        for _ in range(3):
            await pool.run_once()
        origin = f"http://127.0.0.1:{target.port}"
        assert pool.breakers.state((str(a.tenant_id), origin)) == "open"
        assert pool.breakers.state((str(b.tenant_id), origin)) == "closed"
        target.status = 200
        healthy = await tf.job(db, b.tenant_id, queue=HTTP_QUEUE, target_ref=f"{target.url}/b")
        [eid] = await tf.ready_executions(db, healthy)
        sent_before = len(target.requests)
        await pool.run_once()
        assert len(target.requests) == sent_before + 1 and (await execution(db, eid)).state == "succeeded"
    finally:
        await pool.close()


async def test_fairness_http_pool_50000_backlog_does_not_delay_50(db: Database) -> None:
    """Tenant A has 50,000 ready http executions; B's 50 are all leased within the next two batches."""
    transport = Recorder()
    sent = transport.sent
    a, b = await tf.tenant(db), await tf.tenant(db)
    await db.transaction(lambda c: c.tenants.set_quota(a.tenant_id, max_inflight=100_000))
    job_a = await tf.job(db, a.tenant_id, queue=HTTP_QUEUE, target_ref="http://127.0.0.1:9/a")
    from datetime import datetime, timedelta, timezone

    old = datetime.now(timezone.utc) - timedelta(hours=1)
    await tf.insert_ready(db, [job_a] * 50_000, [old + timedelta(milliseconds=i) for i in range(50_000)])
    job_b = await tf.job(db, b.tenant_id, queue=HTTP_QUEUE, target_ref="http://127.0.0.1:9/b")
    b_ids = set(await tf.ready_executions(db, job_b, 50))
    pool = make_pool(db, transport=transport, batch=50, concurrency=50)
    leased_b: set = set()
    try:
        for _ in range(2):
            batch = await pool.run_once()
            assert len(batch) == 50
            leased_b |= {x.execution_id for x in batch if x.tenant_id == str(b.tenant_id)}
    finally:
        await pool.close()
    assert leased_b == {str(i) for i in b_ids}
    assert sum(1 for r in sent if r.url.endswith("/b")) == 50
