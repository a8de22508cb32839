"""`kairos up` and ports held by another process: one line and exit code 1, never "Kairos is up".

Before starting anything, `kairos up` binds its ports once; after starting its children it trusts
only answers carrying its run's token, so a port that another process answers on is reported
instead of being taken for Kairos.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.cli.supervisor import StartFailed, Supervisor, SupervisorConfig
from app.config import load
from tests.conftest import free_port

pytestmark = pytest.mark.slow


@contextmanager
def plain_listener() -> Iterator[int]:
    """A port held by a plain listening socket that never answers."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@contextmanager
def impostor_api() -> Iterator[int]:
    """A port held by an HTTP server that answers 200 to everything, as another API would."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ready"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _env(home: Path, api_port: int, grpc_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_HOME": str(home),
            "KAIROS_API_PORT": str(api_port),
            "KAIROS_GRPC_PORT": str(grpc_port),
            "KAIROS_API_WORKERS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.mark.parametrize("taken", ["api", "grpc"])
def test_up_refuses_a_port_held_by_another_process_at_once(tmp_path: Path, taken: str) -> None:
    with plain_listener() as held:
        api_port, grpc_port = (held, free_port()) if taken == "api" else (free_port(), held)
        home = tmp_path / "home"
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "up"],
            env=_env(home, api_port, grpc_port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # it came up (or hangs): let it stop its children
            try:
                out, err = proc.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise AssertionError(f"kairos up did not fail at once:\n{out}\n{err}") from None
    variable = "KAIROS_API_PORT" if taken == "api" else "KAIROS_GRPC_PORT"
    assert proc.returncode == 1, out + err
    assert err == f"error: port 127.0.0.1:{held} in use ({variable})\n"
    assert out == ""
    assert not (home / "pgdata").exists()  # refused before it started anything


@pytest.mark.parametrize("taken", ["api", "grpc"])
def test_a_tier_that_cannot_bind_is_reported_even_when_another_process_answers_on_its_port(
    tmp_path: Path, database_url: str, taken: str
) -> None:
    # The port is taken after the check before start-up (here: the children are started directly),
    # and the process holding it answers the readiness probe.
    holder = impostor_api() if taken == "api" else plain_listener()
    with holder as held:
        api_port, grpc_port = (held, free_port()) if taken == "api" else (free_port(), held)
        env = _env(tmp_path / "home", api_port, grpc_port)
        sup = Supervisor(load(env), database_url, SupervisorConfig(ready_timeout_s=60), env)
        try:
            for child in sup.children:
                sup.start(child)
            with pytest.raises(StartFailed) as failed:
                asyncio.run(sup.wait_ready())
        finally:
            sup.stop()
    variable = "KAIROS_API_PORT" if taken == "api" else "KAIROS_GRPC_PORT"
    assert str(failed.value) == f"port 127.0.0.1:{held} in use ({variable})"
