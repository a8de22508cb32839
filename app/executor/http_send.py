"""How an HTTP delivery's request is sent: the ``Sender`` seam of the pool (``app.executor.http_pool``) and its
aiohttp implementation.

aiohttp was chosen by measurement: against the same local uvicorn receiver it spent 138-202 us of client CPU
per request, httpx 1,200-1,231 us (docs/performance.md, "HTTP delivery"). A 2xx answer's body is not read; of
another, at most ``error_body_bytes``. One total timeout covers the exchange, from connecting to the last byte
read, so a target that trickles its answer cannot stretch it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Protocol

import aiohttp

RETRY_AFTER_MAX_S = 3600.0  # a Retry-After further off than this is read as this


@dataclass(frozen=True)
class Answer:
    status: int
    encoding: str | None  # Content-Encoding
    retry_after: str | None  # Retry-After, as sent
    excerpt: bytes  # at most error_body_bytes of a non-2xx answer's body


class Sender(Protocol):
    """Sends one request; the pool's own (``AiohttpSender``) or a test's."""

    async def __call__(self, method: str, url: str, body: bytes, headers: dict[str, str],
                       server_hostname: str | None, timeout_s: float) -> Answer: ...

    async def close(self) -> None: ...


class SendFailed(Exception):
    """The request got no answer: a connection error (a timeout raises TimeoutError)."""


class AiohttpSender:
    """aiohttp's client: a keep-alive connection pool per origin address, one total timeout per exchange."""

    def __init__(self, concurrency: int, error_body_bytes: int) -> None:
        self.concurrency = concurrency
        self.error_body_bytes = error_body_bytes
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=0,
                                             use_dns_cache=False, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                trust_env=False, raise_for_status=False)
        return self._session

    async def __call__(self, method: str, url: str, body: bytes, headers: dict[str, str],
                       server_hostname: str | None, timeout_s: float) -> Answer:
        session = self._open()
        try:
            async with session.request(method, url, data=body or None, headers=headers, allow_redirects=False,
                                       timeout=aiohttp.ClientTimeout(total=timeout_s),
                                       server_hostname=server_hostname) as response:
                status = response.status
                if 200 <= status < 300:
                    return Answer(status, None, None, b"")
                raw = bytearray()
                async for chunk in response.content.iter_chunked(self.error_body_bytes):
                    raw += chunk
                    if len(raw) >= self.error_body_bytes:
                        break
                return Answer(status, response.headers.get("Content-Encoding"),
                              response.headers.get("Retry-After"), bytes(raw))
        except aiohttp.ClientError as exc:
            if isinstance(exc, aiohttp.ServerTimeoutError):
                raise TimeoutError(str(exc)) from exc
            raise SendFailed(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` value (delay-seconds or an HTTP-date) asks for; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MAX_S)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    delta = when.timestamp() - (time.time() if now is None else now)
    return min(max(0.0, delta), RETRY_AFTER_MAX_S)
