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
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import uvicorn

from app.api.app import create_app
from app.api.metrics import TierMetrics, start_worker_listener, worker_socket
from app.api.telemetry import RequestTelemetry
from app.config import Settings
from app.store import Database

log = logging.getLogger(__name__)

# A worker that lived less than this was failing to start, not crashing in service.
STARTUP_WINDOW_S = 5.0
RESTART_BACKOFF_S = 1.0


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
    config = uvicorn.Config(RequestTelemetry(create_app(settings, db)), log_config=None, access_log=False,
                            lifespan="on", timeout_graceful_shutdown=5, http="httptools", backlog=2048)
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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(worker_socket(settings.api_metrics_dir, os.getpid()))


def run_workers(settings: Settings) -> int:
    """Supervise ``settings.api_workers`` single-process API workers on one port; their exit code.

    This process answers the tier's metrics for them (app.api.metrics.TierMetrics): on the metrics
    port, and to ``GET /metrics`` on the API port through the workers.
    """
    # Refuse at once, with one line, when the port is taken by something that is not sharing it.
    _listen(settings, reuse_port=True).close()
    metrics_dir = tempfile.mkdtemp(prefix="kairos-api-")
    tier = TierMetrics(metrics_dir, settings.metrics_host, settings.metrics_port)
    try:
        return _supervise(settings, metrics_dir, tier)
    finally:
        tier.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _supervise(settings: Settings, metrics_dir: str, tier: TierMetrics) -> int:
    # The children read these back through app.config (api_workers, api_reuse_port, api_metrics_dir);
    # the metrics port is this process's, not theirs.
    env = {**os.environ, "KAIROS_API_WORKERS": "1", "KAIROS_API_REUSE_PORT": "1",
           "KAIROS_API_METRICS_DIR": metrics_dir, "KAIROS_METRICS_PORT": "0"}
    stopping = False

    def start() -> tuple[subprocess.Popen, float]:
        return subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env), time.monotonic()

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
            workers[i] = start()
        if stopping:
            codes = [proc.wait() for proc, _ in workers]
            return next((c for c in codes if c not in (0, -signal.SIGTERM, -signal.SIGINT)), 0)
        time.sleep(0.2)
