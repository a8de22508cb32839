"""`kairos api`: the Litestar app on uvicorn, in one process or several sharing the port.

With ``KAIROS_API_WORKERS`` > 1 (the default is one per CPU) the command is a small supervisor:
it starts that many single-process API workers that each bind the same port with SO_REUSEPORT,
so the kernel spreads connections across them, forwards SIGTERM/SIGINT to them, restarts a
worker that dies after it has served, and answers the tier's metrics for all of them
(app.api.metrics). A worker that dies during start-up (a port in use, a bad setting) stops the
whole command with its exit code instead of looping.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.app import create_app
from app.api.metrics import TierMetrics, start_worker_listener, worker_socket
from app.api.telemetry import RequestTelemetry
from app.config import Settings
from app.store import Database

log = logging.getLogger(__name__)

# A worker that lived less than this was failing to start, not crashing in service.
STARTUP_WINDOW_S = 5.0
RESTART_BACKOFF_S = 1.0


def _problem_response(status: int, reason: str, slug: str, title: str, detail: str) -> bytes:
    """A whole HTTP/1.1 response carrying an RFC 9457 problem, for refusals made before the app runs."""
    body = msgspec.json.encode(
        {"type": f"https://kairos.dev/problems/{slug}", "title": title, "status": status, "detail": detail}
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _HeadTooLarge(Exception):
    """Raised from a parser callback: the parser stops, and uvicorn answers through send_400_response."""


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on the request head and problem+json refusals.

    httptools (llhttp) reads a header of any length, so a 1 MiB Authorization header would be held
    and handed to the app. Here a request's line and headers are measured as the parser reports
    them, and bytes received while they are still incomplete are counted, so the parser never holds
    much more than ``max_header_bytes`` of head: past it the request gets 431 and the connection is
    closed, and the app never sees it. What the parser refuses (not HTTP, a NUL in a header) gets
    400. Both bodies are application/problem+json, like every other error of the API, instead of
    uvicorn's text/plain.
    """

    max_header_bytes = 32 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between a request's first byte and the end of its headers
        self._head_bytes = 0  # bytes received while in the head
        self._head_size = 0  # the request line and headers as parsed
        self._too_large = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_size = True, 0

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes = False, 0
        if self._head_size > self.max_header_bytes:
            self._too_large = True
            raise _HeadTooLarge()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # what comes next on the connection is the next request's head

    def data_received(self, data: bytes) -> None:
        if self._too_large:
            return  # refused; the connection is closing
        if self._in_head:
            if self._head_bytes > self.max_header_bytes:  # all that came before this chunk was head
                self._too_large = True
                self.send_400_response("")
                return
            self._head_bytes += len(data)
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            log.warning("request head too large; refused", extra={"limit_bytes": self.max_header_bytes})
            response = _problem_response(
                431,
                "Request Header Fields Too Large",
                "headers-too-large",
                "The request's headers are too large.",
                f"the request line and headers are longer than this server's limit of {self.max_header_bytes} bytes",
            )
        else:
            response = _problem_response(
                400,
                "Bad Request",
                "malformed-request",
                "The request is not HTTP.",
                "the server could not parse the request as HTTP/1.1",
            )
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()


def _protocol(settings: Settings) -> type[BoundedHttpProtocol]:
    return type("KairosHttpProtocol", (BoundedHttpProtocol,), {"max_header_bytes": settings.api_max_header_bytes})


def _listen(settings: Settings, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in settings.api_host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((settings.api_host, settings.api_port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"error: cannot listen on {settings.api_host}:{settings.api_port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve(settings: Settings, db: Database, stop: asyncio.Event) -> None:
    sock = _listen(settings, reuse_port=settings.api_reuse_port)
    # uvicorn's access log stays off: RequestTelemetry writes the one line per request.
    app = RequestTelemetry(create_app(settings, db))
    gc.freeze()  # the application's routes and models join what the tier froze once started (settle_gc)
    # Proxy headers only from KAIROS_TRUSTED_PROXIES (uvicorn would trust loopback's by default): a client
    # that could name its own address would pick its auth-throttle bucket, or a victim's.
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        http=_protocol(settings),
        backlog=2048,
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies),
    )
    server = uvicorn.Server(config)
    # Under a supervisor: answer its tier-wide scrape (app.api.metrics).
    listener = await start_worker_listener(settings.api_metrics_dir, db) if settings.api_metrics_dir else None
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="uvicorn")
    stopping = asyncio.create_task(stop.wait(), name="api-stop")
    log.info("api listening", extra={"url": settings.api_url, "pid": os.getpid()})
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    await serving
    stopping.cancel()
    if listener is not None:
        listener.close()
        await asyncio.to_thread(Path(worker_socket(settings.api_metrics_dir, os.getpid())).unlink, missing_ok=True)


def run_workers(settings: Settings) -> int:
    """Supervise ``settings.api_workers`` single-process API workers on one port; their exit code.

    This process answers the tier's metrics for them (app.api.metrics.TierMetrics): on the metrics
    port, and to ``GET /metrics`` on the API port through the workers.
    """
    # Refuse at once, with one line, when the port is taken by something that is not sharing it.
    _listen(settings, reuse_port=True).close()
    metrics_dir = tempfile.mkdtemp(prefix="kairos-api-")
    tier = TierMetrics(metrics_dir, settings.metrics_host, settings.metrics_port, settings.metrics_token)
    try:
        return _supervise(settings, metrics_dir, tier)
    finally:
        tier.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _supervise(settings: Settings, metrics_dir: str, tier: TierMetrics) -> int:
    # The children read these back through app.config (api_workers, api_reuse_port, api_metrics_dir);
    # the metrics port is this process's, not theirs.
    # The metrics port is ours; the workers still refuse it as an HTTP target (KAIROS_INSTALLATION_PORTS).
    known = sorted({*settings.installation_ports, *([settings.metrics_port] if settings.metrics_port else [])})
    env = {
        **os.environ,
        "KAIROS_API_WORKERS": "1",
        "KAIROS_API_REUSE_PORT": "1",
        "KAIROS_API_METRICS_DIR": metrics_dir,
        "KAIROS_METRICS_PORT": "0",
        "KAIROS_INSTALLATION_PORTS": ",".join(map(str, known)),
    }
    stopping = False

    def start() -> tuple[subprocess.Popen[bytes], float]:
        return subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env), time.monotonic()

    def stop_requested() -> bool:  # read afresh: a signal handler may set it between two checks
        return stopping

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for proc, _ in workers:
            if proc.poll() is None:
                proc.send_signal(signum)

    workers = [start() for _ in range(settings.api_workers)]
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("api workers started", extra={"workers": len(workers), "pids": [p.pid for p, _ in workers]})
    tier.start(lambda: [proc.pid for proc, _ in workers if proc.poll() is None])
    while True:
        for i, (proc, started) in enumerate(workers):
            code = proc.poll()
            if code is None or stopping:
                continue
            if time.monotonic() - started < STARTUP_WINDOW_S:
                log.error("api worker failed to start; stopping", extra={"pid": proc.pid, "exit_code": code})
                on_signal(signal.SIGTERM, None)
                break
            log.warning("api worker died; restarting", extra={"pid": proc.pid, "exit_code": code})
            time.sleep(RESTART_BACKOFF_S)
            if stop_requested():  # the stop came during the back-off: nothing to restart, and none to wait for
                del workers[i]
                break
            workers[i] = start()
            if stop_requested():  # ... or as the new worker started: it gets the signal too
                workers[i][0].send_signal(signal.SIGTERM)
        if stopping:
            codes = [proc.wait() for proc, _ in workers]
            return next((c for c in codes if c not in (0, -signal.SIGTERM, -signal.SIGINT)), 0)
        time.sleep(0.2)
