"""The metrics and probe port (KAIROS_METRICS_PORT): ``/metrics``, ``/healthz`` and ``/readyz``.

A small HTTP/1.1 server on asyncio, in the event loop of the process it describes, so ``/readyz``
can ask that process's own database pool and ``/metrics`` renders without another thread. It
answers GET (and HEAD) of three paths, one request per connection: what kubelet probes and a
Prometheus scrape need, and nothing a tenant can reach.

* ``/healthz``: 200 while the event loop runs and every loop watched by ``LIVENESS`` keeps going;
  503 naming the silent loop otherwise. A stopped process or a blocked event loop answers
  nothing at all, so the liveness probe (kubelet's, or ``kairos up``'s) fails either way. Under
  ``kairos up`` the body carries the run's ``supervisorToken``.
* ``/readyz``: 200 when ``ready()`` returns None, else 503 with its reason.
* ``/metrics``: ``metrics()``, Prometheus text; with a ``metrics_token`` (KAIROS_METRICS_TOKEN) only
  to a request carrying ``Authorization: Bearer <token>``, else 401. The probes never need it: the
  kubelet sends no credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from app.observability import EXPOSITION_CONTENT_TYPE

log = logging.getLogger(__name__)

# A request head must arrive within this long and fit in the stream's 64 KiB limit.
REQUEST_TIMEOUT_S = 5.0
_REASONS = {
    200: "OK",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

Metrics = Callable[[], Awaitable[bytes]]
Ready = Callable[[], Awaitable[str | None]]
Live = Callable[[], str | None]


class Liveness:
    """The checks of a process's long-lived loops: each, called by ``/healthz``, returns None while its
    loop keeps going, else why not; ``silent()`` answers the first such reason."""

    def __init__(self) -> None:
        self._checks: dict[str, Live] = {}

    def watch(self, loop: str, check: Live) -> None:
        self._checks[loop] = check

    def forget(self, loop: str) -> None:
        """The loop ended on purpose (shutdown): its silence means nothing."""
        self._checks.pop(loop, None)

    def silent(self) -> str | None:
        for check in list(self._checks.values()):
            if (reason := check()) is not None:
                return reason
        return None


# The process's loops register here; /healthz of its probe port asks them.
LIVENESS = Liveness()

# How often a heartbeat file is touched; a reader should allow a few intervals.
HEARTBEAT_INTERVAL_S = 1.0


async def heartbeat(
    path: str, token: str, *, live: Live = LIVENESS.silent, interval_s: float = HEARTBEAT_INTERVAL_S
) -> None:
    """Touch ``path`` every ``interval_s`` while this event loop runs and ``live()`` finds no silent loop:
    `kairos up`'s liveness check of its scheduler and executor, which needs no port (a metrics port is
    optional and may be taken by another process). The file holds ``token`` and the pid, so the
    supervisor knows it is its own child's; its age is the time since the last sign of life. A stopped
    process or a blocked loop stops touching it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    written = False
    while True:
        if live() is None:
            try:
                if written:
                    os.utime(path)
                else:
                    with open(path, "w") as beat:  # noqa: ASYNC230 - one short line to a local file
                        beat.write(f"{token} {os.getpid()}\n")
                    written = True
            except FileNotFoundError:
                written = False  # removed under us: written again next time
            except OSError as exc:
                log.warning("cannot touch the heartbeat file", extra={"path": path, "error": exc.strerror})
        await asyncio.sleep(interval_s)


def scrape_allowed(authorization: str, metrics_token: str) -> bool:
    """Whether an ``Authorization`` header value may read /metrics: always without a token; with one, only
    ``Bearer <token>`` (digests compared in constant time, whatever the lengths)."""
    if not metrics_token:
        return True
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        hashlib.sha256(presented.strip().encode()).digest(), hashlib.sha256(metrics_token.encode()).digest()
    )


async def serve_probes(
    host: str,
    port: int,
    *,
    metrics: Metrics,
    ready: Ready,
    live: Live = LIVENESS.silent,
    token: str = "",
    metrics_token: str = "",
) -> asyncio.Server | None:
    """Listen on ``host:port``; None (logged as an error) when the port cannot be bound. ``token`` (the
    run's KAIROS_SUPERVISOR_TOKEN) is echoed by ``/healthz`` so ``kairos up`` knows it reached its own child.

    A taken port does not stop the process: on one machine several processes of a tier may run
    with the same settings (tests, benchmarks), and in a pod the probes failing say it anyway.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _answer(reader, writer, metrics, ready, live, token, metrics_token)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except Exception:
            log.exception("metrics port request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    try:
        server = await asyncio.start_server(handle, host, port)
    except OSError as exc:
        log.error(
            "cannot listen on the metrics port; /metrics, /healthz and /readyz are not served",
            extra={"host": host, "port": port, "error": exc.strerror or str(exc)},
        )
        return None
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    log.info("metrics listening", extra={"url": f"http://{host}:{bound}/metrics"})
    return server


async def _answer(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    metrics: Metrics,
    ready: Ready,
    live: Live,
    token: str,
    metrics_token: str,
) -> None:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, _, rest = request_line.partition(" ")
    path = rest.split(" ", 1)[0].split("?", 1)[0]
    content_type = "application/json"
    extra = ""
    if method not in ("GET", "HEAD"):
        status, body = 405, b'{"status":"method not allowed"}'
    elif path == "/metrics" and not scrape_allowed(_header(header_lines, "authorization"), metrics_token):
        status, body, extra = 401, b'{"status":"unauthorized"}', "WWW-Authenticate: Bearer\r\n"
    elif path == "/metrics":
        status, body, content_type = 200, await metrics(), EXPOSITION_CONTENT_TYPE
    elif path == "/healthz":
        silent = live()
        status = 200 if silent is None else 503
        answer = {"status": "ok"} if silent is None else {"status": "wedged", "reason": silent}
        body = json.dumps(answer | ({"supervisorToken": token} if token else {}), separators=(",", ":")).encode()
    elif path == "/readyz":
        reason = await ready()
        status = 200 if reason is None else 503
        body = json.dumps(
            {"status": "ready"} if reason is None else {"status": "unavailable", "reason": reason},
            separators=(",", ":"),
        ).encode()
    else:
        status, body = 404, b'{"status":"not found"}'
    writer.write(
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n{extra}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
    )
    if method != "HEAD":
        writer.write(body)
    await writer.drain()


def _header(lines: list[str], name: str) -> str:
    """The value of header ``name`` (lower case) in a request head's lines; empty when it is absent."""
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return ""
