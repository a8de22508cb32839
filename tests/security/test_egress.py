"""The egress policy: port-scoped allow entries, Kairos's own ports never reachable, IPv6 forms that
embed IPv4 judged by the address they embed, unresolvable names retried, and dead letters that never
reveal an internal address nor more than a short excerpt of an answer."""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import text

from app.config import Settings
from app.domain.egress import EgressPolicy, literal_address
from app.domain.jobs import validate_target
from app.errors import EgressRefused, InvalidInput
from app.executor.batching import Outcomes
from app.executor.delivery_egress import allow_list_warnings, own_ports, resolve
from app.executor.http_pool import HTTP_QUEUE, HttpPool, HttpPoolConfig
from app.store.db import Database
from tests import factories as tf

EMBEDDING_LOOPBACK_OR_METADATA = [
    "::127.0.0.1",  # IPv4-compatible
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:0:7f00:1",  # IPv4-translated (SIIT)
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address
    "64:ff9b::7f00:1",  # NAT64 of loopback
    "2002:7f00:1::",  # 6to4 of loopback
    "2002:a9fe:a9fe::1",  # 6to4 of the metadata address
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:0:4136:e378:8000:63bf:f5fe:f5f5",  # Teredo, client 10.1.10.10
]


@pytest.mark.parametrize("address", [*EMBEDDING_LOOPBACK_OR_METADATA, "fec0::1", "64:ff9b:1::a00:1", "fe80::1%eth0"])
async def test_ipv6_forms_embedding_a_refused_ipv4_address_are_refused(address: str) -> None:
    """Before: every one of these but Teredo passed (``ipaddress`` calls most of them global)."""
    with pytest.raises(EgressRefused) as refused:
        await resolve(EgressPolicy(), address, 80)
    assert "target refused by egress policy" in refused.value.detail
    # An allow list for the IPv4 range opens the mapped form (the kernel connects to that address) only.
    allowing = EgressPolicy.from_allow_list(["127.0.0.0/8", "10.0.0.0/8"])
    if address == "::ffff:127.0.0.1":
        assert await resolve(allowing, address, 80) == ipaddress.ip_address(address)
    elif address != "fe80::1%eth0":
        with pytest.raises(EgressRefused):
            await resolve(allowing, address, 80)


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111", "8.8.8.8"])
async def test_public_addresses_in_any_form_pass(address: str) -> None:
    assert await resolve(EgressPolicy(), address, 443) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("127.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("[::1]", "::1"),
        ("0", "0.0.0.0"),
    ],
)
def test_legacy_spellings_of_addresses_are_read_as_addresses(spelling: str, address: str) -> None:
    assert literal_address(spelling) == ipaddress.ip_address(address)
    assert EgressPolicy().refused_literal(spelling, 80) is not None


def test_allow_entries_take_a_port_and_open_that_port_only() -> None:
    """Before: `127.0.0.1:38182` parsed as a host name and silently allowed nothing."""
    policy = EgressPolicy.from_allow_list(
        ["127.0.0.1:38182", "[::1]:8443", "10.0.0.0/8:443", "hooks.internal:8080", "192.168.1.0/24"]
    )
    assert policy.invalid == ()
    loop, v6, ten, lan = (ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.2.3.4", "192.168.1.9"))
    assert policy.refusal("127.0.0.1", loop, 38182) is None
    assert policy.refusal("127.0.0.1", loop, 38183) == "127.0.0.1 is a loopback address"
    assert policy.refusal("::1", v6, 8443) is None and policy.refusal("::1", v6, 80)
    assert policy.refusal("10.2.3.4", ten, 443) is None and policy.refusal("10.2.3.4", ten, 80)
    assert policy.refusal("hooks.internal", ten, 8080) is None and policy.refusal("hooks.internal", ten, 8081)
    assert policy.refusal("x", lan, 1) is None and policy.refusal("x", lan, 65535) is None


def test_kairos_own_ports_are_refused_even_when_allowed() -> None:
    settings = Settings(
        api_port=8080, grpc_port=50051, metrics_port=9470, database_url="postgresql://kairos@127.0.0.1:5433/kairos"
    )
    ports = own_ports(settings)
    assert {8080, 50051, 9469, 9470, 9471, 9464, 9465, 5433} <= ports
    assert 8080 not in own_ports(replace(settings, demo=True))  # the demo job posts to the API's /demo/echo
    policy = EgressPolicy.from_allow_list(["127.0.0.1", "127.0.0.1:8080", "hooks.internal"], own_ports=ports)
    loop = ipaddress.ip_address("127.0.0.1")
    for port in (8080, 50051, 9470, 5433):
        assert policy.refusal("127.0.0.1", loop, port) == f"port {port} is one of Kairos's own listening ports"
        assert policy.refusal("hooks.internal", ipaddress.ip_address("10.0.0.7"), port)
        assert policy.refusal("::ffff:127.0.0.1", ipaddress.ip_address("::ffff:127.0.0.1"), port)
    assert policy.refusal("127.0.0.1", loop, 38182) is None
    # A public address keeps every port: Kairos's ports are only its own on non-public addresses.
    assert policy.refusal("example.com", ipaddress.ip_address("93.184.215.14"), 8080) is None


async def test_allow_entries_that_match_nothing_plausible_are_named_at_start() -> None:
    policy = EgressPolicy.from_allow_list(
        [
            "127.0.0.1:8080",
            "8.8.8.8",
            "0.0.0.0/0",
            "169.254.169.254",
            "10.0.0.0/8:99999",
            "not a host",
            "kairos-test.invalid",
            "10.0.0.0/8",
            "localhost",
        ],
        own_ports={8080},
    )
    warned = dict(await allow_list_warnings(policy))
    assert "own listening ports" in warned["127.0.0.1:8080"]
    assert "changes nothing" in warned["8.8.8.8"]
    assert "every address" in warned["0.0.0.0/0"]
    assert "metadata" in warned["169.254.169.254"]
    assert "1-65535" in warned["10.0.0.0/8:99999"]
    assert "not an IP address" in warned["not a host"]
    assert "does not resolve" in warned["kairos-test.invalid"]
    assert "10.0.0.0/8" not in warned and "localhost" not in warned


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.1.2.3:8080/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fec0::1]/",
        "http://2130706433/",
        "http://localhost:9000/",
        "http://api.localhost/",
        "https://[fe80::1%25eth0]/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
    ],
)
def test_literal_internal_addresses_are_refused_at_submit(url: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_target("http", url, EgressPolicy())
    assert refused.value.field == "target.ref" and "egress policy" in refused.value.detail
    validate_target("http", url)  # without the server's policy (the CLI's own check) the URL is well formed


def test_submit_accepts_public_and_allow_listed_targets_and_names() -> None:
    policy = EgressPolicy.from_allow_list(["10.0.0.0/8", "localhost:9000"], own_ports={8080})
    for url in (
        "https://93.184.215.14/hook",
        "https://[2606:4700:4700::1111]/",
        "https://hooks.example.com/x",
        "http://10.1.2.3:8081/hook",
        "http://localhost:9000/x",
    ):
        validate_target("http", url, policy)
    with pytest.raises(InvalidInput, match="own listening ports"):
        validate_target("http", "http://10.1.2.3:8080/hook", policy)
    with pytest.raises(InvalidInput, match="not a valid URL"):
        validate_target("http", "http://example.com:99999/", policy)


# -- at delivery -----------------------------------------------------------------------------------


class Answers:
    """A local endpoint answering ``status`` with ``body``; counts what reaches it."""

    def __init__(self, status: int = 200, body: bytes = b"") -> None:
        self.status, self.body, self.received = status, body, 0
        answers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answers.received += 1
                self.send_response(answers.status)
                self.send_header("Content-Length", str(len(answers.body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):
                    self.wfile.write(answers.body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def answers() -> Iterator[list[Answers]]:
    made: list[Answers] = []
    yield made
    for a in made:
        a.close()


async def deliver(db: Database, urls: list[str], policy: EgressPolicy, *, max_attempts: int = 3) -> list:
    t = await tf.tenant(db)
    ids = []
    for url in urls:
        job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=url, max_attempts=max_attempts)
        ids += await tf.ready_executions(db, job)
    pool = HttpPool(db, Outcomes(db), HttpPoolConfig(), egress=policy)
    try:
        await pool.run_once()
    finally:
        await pool.close()

    async def read(conn):
        return (
            await conn.execute(
                text("SELECT execution_id, state, attempt, error FROM executions WHERE execution_id = ANY(:ids)"),
                {"ids": ids},
            )
        ).all()

    by_id = {r.execution_id: r for r in await tf.raw(db, read)}
    return [by_id[i] for i in ids]


async def test_port_scoped_entries_and_kairos_ports_at_delivery(db: Database, answers: list[Answers]) -> None:
    allowed, other, kairos = Answers(), Answers(), Answers()
    answers += [allowed, other, kairos]
    policy = EgressPolicy.from_allow_list([f"127.0.0.1:{allowed.port}", "localhost"], own_ports={kairos.port})
    ok, refused, own = await deliver(
        db,
        [f"http://127.0.0.1:{allowed.port}/a", f"http://127.0.0.1:{other.port}/b", f"http://localhost:{kairos.port}/c"],
        policy,
    )
    assert ok.state == "succeeded" and allowed.received == 1
    assert refused.state == "dead" and "loopback" in refused.error and other.received == 0
    # Allowed by host name, refused for the port; the dead letter does not say what the name resolved to.
    assert own.state == "dead" and own.error == "target refused by egress policy" and kairos.received == 0


async def test_a_name_that_does_not_resolve_is_retried_with_backoff(db: Database) -> None:
    """Before: dead at once, with its attempts left."""
    [row] = await deliver(db, ["https://kairos-test.invalid/hook"], EgressPolicy())
    assert row.state == "ready" and row.attempt == 1
    assert row.error.startswith("kairos-test.invalid does not resolve")


async def test_a_refused_name_never_reveals_its_address(db: Database, answers: list[Answers]) -> None:
    target = Answers()
    answers.append(target)
    [row] = await deliver(db, [f"http://localhost:{target.port}/x"], EgressPolicy())
    assert row.state == "dead" and row.error == "target refused by egress policy"
    assert "127.0.0.1" not in row.error and target.received == 0


async def test_a_failure_keeps_a_short_clean_excerpt_of_the_answer(db: Database, answers: list[Answers]) -> None:
    """An answer of 1 MiB with NUL characters (PostgreSQL text cannot hold them): 512 bytes are kept, cleaned."""
    target = Answers(404, b"secret\x00" + b"x" * (1 << 20))
    answers.append(target)
    [row] = await deliver(db, [f"http://127.0.0.1:{target.port}/x"], EgressPolicy.from_allow_list(["127.0.0.1"]))
    assert row.state == "dead"
    assert row.error.startswith("HTTP 404: secret\ufffdxxx")
    assert "\x00" not in row.error and len(row.error) == len("HTTP 404: ") + 512
