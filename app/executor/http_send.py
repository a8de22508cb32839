"""How an HTTP delivery's request is sent: the ``Sender`` seam of the pool (``app.executor.http_pool``), what
it answers, and the reading of ``Retry-After``. The pool's own sender is ``app.executor.http_client``; tests
pass one that answers without a network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Protocol

RETRY_AFTER_MAX_S = 3600.0  # a Retry-After further off than this is read as this


@dataclass(frozen=True)
class Origin:
    """Where a request goes: the address the egress check resolved, and the name TLS must verify."""

    scheme: str  # "http" or "https"
    address: str  # an IP address (IPv6 without brackets)
    port: int
    server_hostname: str | None  # https: the host name the certificate must carry

    def url(self, path: str) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port}{path}"


@dataclass(frozen=True)
class Answer:
    status: int
    encoding: str | None  # Content-Encoding
    retry_after: str | None  # Retry-After, as sent
    excerpt: bytes  # at most error_body_bytes of a non-2xx answer's body


class Sender(Protocol):
    """Sends one request within ``timeout_s`` (else TimeoutError; SendFailed when no answer came); the pool's
    own (``HttpClient``) or a test's."""

    async def __call__(
        self, method: str, origin: Origin, path: str, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> Answer: ...

    async def close(self) -> None: ...


class SendFailed(Exception):
    """The request got no answer: a connection error (a timeout raises TimeoutError)."""


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
