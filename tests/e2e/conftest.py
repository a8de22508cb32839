"""`kairos up` as a real process tree on a fresh KAIROS_HOME (embedded PostgreSQL), free ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import free_port


@dataclass
class KairosUp:
    proc: subprocess.Popen
    env: dict[str, str]
    home: Path
    api: str
    grpc_addr: str
    key: str
    signing_secret: str | None  # the demo tenant's, as the banner prints it
    output: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def text(self) -> str:
        return "".join(self.output)


@contextmanager
def kairos_up(tmp_path: Path, *args: str, **extra_env: str) -> Iterator[KairosUp]:
    """Start `kairos up ARGS`, read its banner to its last line, yield; on exit SIGINT it and wait for it to stop."""
    home = tmp_path / "home"
    api_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_HOME": str(home),
            "KAIROS_API_PORT": str(api_port),
            "KAIROS_GRPC_PORT": str(grpc_port),
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "up", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            output.append(line)
            if line.startswith("Stop with Ctrl-C."):  # the banner's last line
                break
        banner = "".join(output)
        key = re.search(r"demo key\s+(\S+)", banner)
        secret = re.search(r"^  signing\s+(\S+)", banner, re.MULTILINE)
        assert key, banner
        # Keep draining the output so `kairos up` never blocks on a full pipe.
        threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
        yield KairosUp(
            proc,
            env,
            home,
            f"http://127.0.0.1:{api_port}",
            f"127.0.0.1:{grpc_port}",
            key.group(1),
            secret.group(1) if secret else None,
            output,
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Request:
    """One request a local endpoint received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes


@contextmanager
def endpoint(status: Callable[[Request], int] = lambda _r: 200) -> Iterator[tuple[str, list[Request]]]:
    """A local HTTP endpoint on a free loopback port for every method: (base URL, requests received);
    ``status`` decides each answer. Stopped when the block ends."""
    received: list[Request] = []

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            received.append(request)
            self.send_response(status(request))
            self.end_headers()

        do_GET = do_POST = do_PUT = do_PATCH = answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
