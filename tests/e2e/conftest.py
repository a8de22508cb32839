"""`kairos up` as a real process tree on a fresh KAIROS_HOME (embedded PostgreSQL), free ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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
    output: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def text(self) -> str:
        return "".join(self.output)


@contextmanager
def kairos_up(tmp_path: Path, *args: str, **extra_env: str) -> Iterator[KairosUp]:
    """Start `kairos up ARGS`, wait for its banner, yield; on exit SIGINT it and wait for it to stop."""
    home = tmp_path / "home"
    api_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update({"KAIROS_HOME": str(home), "KAIROS_API_PORT": str(api_port), "KAIROS_GRPC_PORT": str(grpc_port),
                "PYTHONUNBUFFERED": "1", **extra_env})
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "up", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    try:
        key = None
        deadline = time.monotonic() + 90
        while key is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            output.append(line)
            if m := re.search(r"demo key\s+(\S+)", line):
                key = m.group(1)
        assert key, "".join(output)
        # Keep draining the output so `kairos up` never blocks on a full pipe.
        threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
        yield KairosUp(proc, env, home, f"http://127.0.0.1:{api_port}", f"127.0.0.1:{grpc_port}", key, output)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
