"""The executor's HTTP/1.1 client against a real socket server that answers as scripted (well or badly)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.executor.http_client import HEAD_MAX_BYTES, HttpClient
from app.executor.http_send import Origin, SendFailed

pytestmark = pytest.mark.asyncio

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
HEADERS = {"Host": "target.test", "Content-Type": "application/json"}


@dataclass
class Server:
    """Reads each request (head and Content-Length body) and writes what ``answer(n, request)`` returns, n
    counting requests from 0; None closes the connection without answering, an awaitable is awaited first."""

    answer: Callable[[int, bytes], bytes | None]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    close_after_answer: bool = False
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                body = await reader.readexactly(length)
                n = len(self.requests)
                self.requests.append(head + body)
                out = self.answer(n, head + body)
                if out is None:
                    break
                if out == b"HANG":
                    await asyncio.sleep(3600)
                writer.write(out)
                await writer.drain()
                if self.close_after_answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., asyncio.Future[Server]]]:
    servers: list[asyncio.AbstractServer] = []

    async def start(
        answer: Callable[[int, bytes], bytes | None],
        *,
        tls: ssl.SSLContext | None = None,
        close_after_answer: bool = False,
    ) -> Server:
        s = Server(answer, close_after_answer=close_after_answer)
        server = await asyncio.start_server(s.handle, "127.0.0.1", 0, ssl=tls)
        servers.append(server)
        s.port = server.sockets[0].getsockname()[1]
        return s

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


def origin(server: Server, scheme: str = "http", name: str | None = None) -> Origin:
    return Origin(scheme, "127.0.0.1", server.port, name)


async def test_connections_are_kept_and_reused(serve) -> None:
    server = await serve(lambda n, req: OK)
    client = HttpClient(100)
    try:
        for _ in range(5):
            answer = await client("POST", origin(server), "/hook?a=1", b'{"x":1}', HEADERS, 5)
            assert answer.status == 200
    finally:
        await client.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /hook?a=1 HTTP/1.1\r\nHost: target.test\r\n")
    assert first.endswith(b'Content-Length: 7\r\n\r\n{"x":1}')


async def test_get_carries_no_length_and_posts_an_empty_body_with_one(serve) -> None:
    server = await serve(lambda n, req: OK)
    client = HttpClient(100)
    try:
        await client("GET", origin(server), "/", b"", HEADERS, 5)
        await client("POST", origin(server), "/", b"", HEADERS, 5)
    finally:
        await client.close()
    assert b"content-length" not in server.requests[0].lower()
    assert server.requests[1].endswith(b"Content-Length: 0\r\n\r\n")


async def test_a_closed_idle_connection_is_replaced_without_failing_the_request(serve) -> None:
    # The server closes each connection after answering, without saying so: the next request finds the kept
    # connection dead before any answer and goes again on a new one.
    server = await serve(lambda n, req: OK, close_after_answer=True)
    client = HttpClient(100)
    try:
        for _ in range(3):
            assert (await client("POST", origin(server), "/", b"{}", HEADERS, 5)).status == 200
    finally:
        await client.close()
    assert server.connections == 3
    assert len(server.requests) == 3  # no request was answered twice


async def test_connection_close_is_honoured(serve) -> None:
    server = await serve(lambda n, req: b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    client = HttpClient(100)
    try:
        for _ in range(2):
            assert (await client("POST", origin(server), "/", b"{}", HEADERS, 5)).status == 200
    finally:
        await client.close()
    assert server.connections == 2


async def test_a_new_connection_closed_without_an_answer_fails(serve) -> None:
    server = await serve(lambda n, req: None)
    client = HttpClient(100)
    try:
        with pytest.raises(SendFailed, match="without answering"):
            await client("POST", origin(server), "/", b"{}", HEADERS, 5)
    finally:
        await client.close()
    assert len(server.requests) == 1  # sent once: a fresh connection is not retried


async def test_error_answers_keep_status_headers_and_an_excerpt(serve) -> None:
    chunked = (
        b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\nRetry-After: 7\r\n"
        b"Content-Encoding: identity\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    until_close = b"HTTP/1.1 500 Internal Server Error\r\n\r\n" + b"x" * 5000
    interim = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope"
    answers = [chunked, interim, until_close]
    server = await serve(lambda n, req: answers[n], close_after_answer=False)
    client = HttpClient(8)
    try:
        a = await client("POST", origin(server), "/", b"{}", HEADERS, 5)
        assert (a.status, a.retry_after, a.encoding, a.excerpt) == (503, "7", "identity", b"hello wo")
        b = await client("POST", origin(server), "/", b"{}", HEADERS, 5)
        assert (b.status, b.retry_after, b.excerpt) == (404, None, b"nope")
    finally:
        await client.close()
    # A body without a length is read until the server closes: the answer ends there.
    closing = await serve(lambda n, req: answers[2], close_after_answer=True)
    client = HttpClient(8)
    try:
        c = await client("POST", origin(closing), "/", b"{}", HEADERS, 5)
        assert (c.status, c.excerpt) == (500, b"x" * 8)
        # So is one cut short of its length: the status came, and says what happened.
        answers[2] = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 100\r\n\r\nshort"
        d = await client("POST", origin(closing), "/", b"{}", HEADERS, 5)
        assert (d.status, d.excerpt) == (502, b"short")
    finally:
        await client.close()


async def test_an_error_with_a_large_body_answers_with_its_excerpt_and_closes(serve) -> None:
    big = b"HTTP/1.1 500 Oops\r\nContent-Length: 10000000\r\n\r\n" + b"z" * 400_000
    server = await serve(lambda n, req: big if n == 0 else OK)
    client = HttpClient(8)
    try:
        answer = await client("POST", origin(server), "/", b"{}", HEADERS, 5)
        assert (answer.status, answer.excerpt) == (500, b"z" * 8)
        assert (await client("POST", origin(server), "/", b"{}", HEADERS, 5)).status == 200
    finally:
        await client.close()
    assert server.connections == 2


async def test_a_2xx_is_done_at_its_headers_and_a_large_body_is_not_drained(serve) -> None:
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"y" * 400_000
    server = await serve(lambda n, req: big if n == 0 else OK)
    client = HttpClient(100)
    try:
        assert (await client("POST", origin(server), "/", b"{}", HEADERS, 5)).status == 200
        assert (await client("POST", origin(server), "/", b"{}", HEADERS, 5)).status == 200
    finally:
        await client.close()
    assert server.connections == 2  # the first connection was closed, not kept


@pytest.mark.parametrize(
    "answer, match",
    [
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (HEAD_MAX_BYTES + 10) + b"\r\n\r\n", "exceed"),
        (b"NOT HTTP AT ALL\r\n\r\n", "malformed"),
        (b"HTTP/1.1 500 Oops\r\nContent-Le", "mid-answer"),
    ],
)
async def test_broken_answers_fail_as_connection_errors(serve, answer: bytes, match: str) -> None:
    server = await serve(lambda n, req: answer, close_after_answer=True)
    client = HttpClient(100)
    try:
        with pytest.raises(SendFailed, match=match):
            await client("POST", origin(server), "/", b"{}", HEADERS, 5)
    finally:
        await client.close()


async def test_one_deadline_covers_the_whole_exchange(serve) -> None:
    server = await serve(lambda n, req: b"HANG")
    client = HttpClient(100)
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        with pytest.raises(TimeoutError):
            await client("POST", origin(server), "/", b"{}", HEADERS, 0.3)
    finally:
        await client.close()
    assert 0.3 <= loop.time() - began < 2.0
    assert client.connections == 0  # a timed-out connection is closed, never reused


async def test_a_refused_connection_fails() -> None:
    with socket.socket() as probe:  # a port nothing listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = HttpClient(100)
    try:
        with pytest.raises(SendFailed, match="ConnectionRefused"):
            await client("POST", Origin("http", "127.0.0.1", port, None), "/", b"{}", HEADERS, 5)
    finally:
        await client.close()


async def test_a_line_break_in_a_header_is_never_sent(serve) -> None:
    server = await serve(lambda n, req: OK)
    client = HttpClient(100)
    try:
        with pytest.raises(SendFailed, match="line break"):
            await client("POST", origin(server), "/", b"{}", {**HEADERS, "X-A": "b\r\nX-Injected: 1"}, 5)
        with pytest.raises(SendFailed, match="line break"):
            await client("POST", origin(server), "/a\r\nX-Injected: 1", b"{}", HEADERS, 5)
    finally:
        await client.close()
    assert server.requests == []


def _certificate(tmp: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for ``name`` (self-signed) and a client context that trusts only it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.2"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


async def test_tls_verifies_the_target_name_not_the_address(serve, tmp_path: Path) -> None:
    server_ctx, client_ctx = _certificate(tmp_path, "hooks.example.test")
    server = await serve(lambda n, req: OK, tls=server_ctx)
    client = HttpClient(100, ssl_context=client_ctx)
    try:
        # Connected to 127.0.0.1, verified as the host name the job wrote.
        ok = await client("POST", origin(server, "https", "hooks.example.test"), "/", b"{}", HEADERS, 5)
        assert ok.status == 200
        with pytest.raises(SendFailed, match="TLS"):
            await client("POST", origin(server, "https", "other.example.test"), "/", b"{}", HEADERS, 5)
    finally:
        await client.close()


async def test_many_concurrent_requests_share_a_bounded_set_of_connections(serve) -> None:
    server = await serve(lambda n, req: OK)
    client = HttpClient(100, idle_max=16)
    try:
        answers = await asyncio.gather(*[client("POST", origin(server), "/", b"{}", HEADERS, 10) for _ in range(200)])
        assert {a.status for a in answers} == {200}
        assert client.connections <= 16  # the rest were closed once their answer was read
        await asyncio.gather(*[client("POST", origin(server), "/", b"{}", HEADERS, 10) for _ in range(16)])
    finally:
        await client.close()
    assert len(server.requests) == 216
