"""The executor's HTTP/1.1 client: keep-alive connections per origin address on asyncio, httptools' parser.

Why not a general client: against the same local receiver, aiohttp spends 4-6x the CPU per request of this
one (docs/performance.md, "HTTP delivery"), and a delivery needs little of what it does: no redirects,
cookies, proxies, decompression or streaming uploads. What a delivery does need is here:

- One deadline for the whole exchange, from taking a connection to the answer's last byte the delivery
  reads, so a target that trickles cannot stretch it.
- A 2xx answer is done when its status line and headers have arrived; its body is drained in the
  background (up to ``DRAIN_MAX_BYTES``, else the connection is closed) before the connection is reused.
  Of another status, at most ``error_body_bytes`` of the body are kept.
- A connection is reused only when the answer allows it (HTTP/1.1 keep-alive, no ``Connection: close``)
  and was read to its end; at most ``idle_per_key`` idle connections are kept per key, and none for longer
  than ``idle_s``.
- An idle connection the server had already closed fails before any byte of an answer arrives: the
  request is sent once more, on a new connection (the delivery's ``Idempotency-Key`` makes a repeat safe).
- Answers that break the protocol, or headers larger than ``HEAD_MAX_BYTES``, fail the exchange as a
  connection error, and the connection is closed.
- TLS verifies the certificate against the target's host name (``server_hostname``), while the
  connection goes to the address the egress check resolved.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable

import httptools

from app.executor.http_send import Answer, Origin, SendFailed

HEAD_MAX_BYTES = 64 * 1024  # status line and headers of one answer
DRAIN_MAX_BYTES = 256 * 1024  # a 2xx body larger than this closes the connection rather than being read
IDLE_S = 30.0  # an idle connection older than this is closed, not reused (servers close theirs at 5-75 s)


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection and the answer it is reading."""

    def __init__(self, error_body_bytes: int, lost: Callable[[_Connection], None]) -> None:
        self.error_body_bytes = error_body_bytes
        self._lost = lost
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._answer: asyncio.Future[Answer] | None = None
        self._done: asyncio.Future[bool] | None = None  # the answer read to its end: reusable or not
        self._received = 0  # bytes of the current answer so far
        self._head_bytes = 0  # of its header lines
        self._status = 0
        self._headers: dict[bytes, bytes] = {}
        self._body = bytearray()
        self._head_done = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(SendFailed("the target switched protocols"))
        except httptools.HttpParserError as exc:
            if self._head_bytes > HEAD_MAX_BYTES:
                self._fail(SendFailed(f"the answer's headers exceed {HEAD_MAX_BYTES} bytes"))
            else:
                self._fail(SendFailed(f"malformed HTTP answer: {exc}"))
        else:
            if not self._head_done and self._received > HEAD_MAX_BYTES:
                self._fail(SendFailed(f"the answer's headers exceed {HEAD_MAX_BYTES} bytes"))
            elif self._head_done and self._received > DRAIN_MAX_BYTES + HEAD_MAX_BYTES:
                self._fail(None)  # a large body: not read to keep the connection (closing settles an error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost(self)
        if self._answer is not None and not self._answer.done():
            if self._received == 0:
                self._answer.set_exception(_NoAnswer())
            elif self._head_done:  # a body read until the connection closes (no length given): it ends here
                self._settle(self._error_answer())
            else:
                self._answer.set_exception(SendFailed("the target closed the connection mid-answer"))
        if self._done is not None and not self._done.done():
            self._done.set_result(False)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value
        self._head_bytes += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        if self._head_bytes > HEAD_MAX_BYTES:
            raise _HeadTooLarge
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: an interim answer, the real one follows
            self._headers = {}
            return
        self._status = status
        self._head_done = True
        if 200 <= status < 300:
            self._settle(Answer(status, None, None, b""))

    def on_body(self, body: bytes) -> None:
        if self._status and not 200 <= self._status < 300 and len(self._body) < self.error_body_bytes:
            self._body += body[: self.error_body_bytes - len(self._body)]

    def on_message_complete(self) -> None:
        if not self._head_done:  # the end of a 1xx
            return
        if not 200 <= self._status < 300:
            self._settle(self._error_answer())
        if self._done is not None and not self._done.done():
            self._done.set_result(self.parser.should_keep_alive())

    def _error_answer(self) -> Answer:
        encoding, retry_after = self._headers.get(b"content-encoding"), self._headers.get(b"retry-after")
        return Answer(
            self._status,
            encoding.decode("latin-1") if encoding else None,
            retry_after.decode("latin-1") if retry_after else None,
            bytes(self._body),
        )

    # the client's side
    def send(self, request: bytes) -> tuple[asyncio.Future[Answer], asyncio.Future[bool]]:
        loop = asyncio.get_running_loop()
        self._answer, self._done = loop.create_future(), loop.create_future()
        self._received, self._head_bytes, self._status, self._headers, self._head_done = 0, 0, 0, {}, False
        self._body = bytearray()
        assert self.transport is not None
        self.transport.write(request)
        return self._answer, self._done

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()
            self._lost(self)

    def _settle(self, answer: Answer) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(answer)

    def _fail(self, exc: Exception | None) -> None:
        if exc is not None and self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        if self._done is not None and not self._done.done():
            self._done.set_result(False)
        self.close()


class _HeadTooLarge(Exception):
    """Raised inside the parser's callback: the answer's header lines exceed HEAD_MAX_BYTES."""


class _NoAnswer(Exception):
    """The connection closed before any byte of an answer: on a reused connection, send again."""


def _request(method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The request's bytes. Names and values were checked against RFC 9110 before (the job's at submission and
    again before sending, Kairos's own are valid); a line break that slipped through is refused here anyway."""
    head = "\r\n".join(
        [
            f"{method} {path} HTTP/1.1",
            *(f"{k}: {v}" for k, v in headers.items()),
            f"Content-Length: {len(body)}\r\n\r\n" if body or method != "GET" else "\r\n",
        ]
    )
    if head.count("\n") != len(headers) + 2 + (1 if body or method != "GET" else 0) or "\r" in path:
        raise SendFailed("the request cannot be sent: a line break in its path or headers")
    return head.encode("latin-1") + body


class HttpClient:
    """Keep-alive HTTP/1.1 connections per ``Origin``; a call is one exchange under one deadline (the pool's
    ``Sender``). At most ``idle_max`` connections are kept idle in all, none longer than ``idle_s``."""

    def __init__(
        self,
        error_body_bytes: int,
        *,
        idle_max: int = 512,
        idle_s: float = IDLE_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.error_body_bytes = error_body_bytes
        self.idle_max = idle_max
        self.idle_s = idle_s
        self._ssl = ssl_context
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._idle_count = 0
        self._open: set[_Connection] = set()
        self._swept = time.monotonic()
        self._closing = False

    @property
    def connections(self) -> int:
        """Connections open now, idle or in an exchange."""
        return len(self._open)

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _new(self) -> _Connection:
        conn = _Connection(self.error_body_bytes, self._open.discard)
        self._open.add(conn)
        return conn

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            if origin.scheme == "https":
                _, conn = await loop.create_connection(
                    self._new,
                    origin.address,
                    origin.port,
                    ssl=self._ssl_context(),
                    server_hostname=origin.server_hostname or origin.address,
                )
            else:
                _, conn = await loop.create_connection(self._new, origin.address, origin.port)
        except ssl.SSLError as exc:
            raise SendFailed(f"TLS: {exc}") from exc
        except OSError as exc:
            raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
        return conn

    def _take_idle(self, origin: Origin, now: float) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest to be open still
            self._idle_count -= 1
            if not conn.closed and now - conn.idle_since < self.idle_s:
                return conn
            conn.close()
        return None

    def _sweep(self, now: float) -> None:
        """Close the connections idle longer than ``idle_s`` (of origins not called since)."""
        self._swept = now
        for origin, idle in list(self._idle.items()):
            while idle and (idle[0].closed or now - idle[0].idle_since >= self.idle_s):
                idle.popleft().close()
                self._idle_count -= 1
            if not idle:
                del self._idle[origin]

    def _keep_when_read(self, origin: Origin, conn: _Connection, done: asyncio.Future[bool]) -> None:
        """Back to the idle connections once its answer is read to the end (if the answer allows reuse)."""

        def settle(fut: asyncio.Future[bool]) -> None:
            if timer is not None:
                timer.cancel()
            if fut.result() and not conn.closed and not self._closing and self._idle_count < self.idle_max:
                conn.idle_since = time.monotonic()
                self._idle.setdefault(origin, deque()).append(conn)
                self._idle_count += 1
            else:
                conn.close()

        timer = None
        if done.done():
            settle(done)
            return
        # A 2xx answer whose body trickles is not waited for: the connection closes after IDLE_S.
        timer = asyncio.get_running_loop().call_later(self.idle_s, conn.close)
        done.add_done_callback(settle)

    async def __call__(
        self, method: str, origin: Origin, path: str, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> Answer:
        """One request and its answer within ``timeout_s`` (else TimeoutError); SendFailed when none came."""
        request = _request(method, path, body, headers)
        async with asyncio.timeout(timeout_s):
            while True:
                now = time.monotonic()
                if now - self._swept > self.idle_s:
                    self._sweep(now)
                conn = self._take_idle(origin, now)
                reused = conn is not None
                if conn is None:
                    conn = await self._connect(origin)
                answer, done = conn.send(request)
                try:
                    result = await answer
                except _NoAnswer:
                    conn.close()
                    if reused:
                        continue  # a keep-alive connection the server had closed: once more, on a new one
                    raise SendFailed("the target closed the connection without answering") from None
                except BaseException:
                    conn.close()  # timed out or cancelled mid-exchange: the connection's state is unknown
                    raise
                self._keep_when_read(origin, conn, done)
                return result

    async def close(self) -> None:
        self._closing = True
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        self._idle_count = 0
