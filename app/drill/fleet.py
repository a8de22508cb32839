"""The Kairos processes of a drill: real ``kairos`` commands and SDK workers, grouped by region.

A ``Fleet`` starts each process in its own session (so a terminal's Ctrl-C reaches the drill, which
then stops them, rather than every child at once), with its own ports and a log file under the
drill's directory, and keeps it until ``close()``: SIGTERM, then SIGKILL of the whole process group
for whatever has not exited within the grace. ``kill()`` is the fault (SIGKILL, no shutdown), and
``pause()`` / ``resume()`` are SIGSTOP / SIGCONT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from app.drill.cluster import die_with_parent, free_port

log = logging.getLogger(__name__)

STOP_GRACE_S_DEFAULT = 5.0
READY_TIMEOUT_S_DEFAULT = 60.0


def kairos_command() -> list[str]:
    """`kairos` from the running environment (the console script beside the interpreter when installed)."""
    script = Path(sys.executable).parent / "kairos"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


@dataclass
class Proc:
    """One process of the fleet."""

    name: str
    region: str
    role: str  # api | scheduler | executor | worker
    popen: subprocess.Popen[bytes]
    log_path: Path
    ready_url: str | None = None  # /readyz to wait for; None: started is ready
    runs_path: Path | None = None  # a worker's record of every run
    worker_id: str | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass(frozen=True)
class RegionEnv:
    """What every process of one region shares."""

    region: str
    primary_region: str
    database_url: str
    home: Path
    settings: dict[str, str]  # further KAIROS_* for the drill's timings


class Fleet:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[Proc] = []
        self._logs: list[IO[bytes]] = []

    # -- starting -----------------------------------------------------------------------------

    def _spawn(self, name: str, region: RegionEnv, role: str, args: list[str], env: dict[str, str]) -> Proc:
        log_path = self.directory / f"{name}.log"
        handle = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._logs.append(handle)
        region.home.mkdir(parents=True, exist_ok=True)
        full_env = {
            **os.environ,
            **region.settings,
            **env,
            "KAIROS_DATABASE_URL": region.database_url,
            "KAIROS_HOME": str(region.home),
            "KAIROS_REGION": region.region,
            "KAIROS_PRIMARY_REGION": region.primary_region,
            "KAIROS_LOG_FORMAT": "json",
        }
        popen = subprocess.Popen(
            args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=True,
            cwd=self.directory,
            preexec_fn=die_with_parent,
        )
        proc = Proc(name=name, region=region.region, role=role, popen=popen, log_path=log_path)
        self.procs.append(proc)
        log.info("drill process started", extra={"proc": name, "pid": popen.pid, "role": role})
        return proc

    def api(self, name: str, region: RegionEnv) -> Proc:
        port = free_port()
        proc = self._spawn(
            name,
            region,
            "api",
            [*kairos_command(), "api"],
            {
                "KAIROS_API_HOST": "127.0.0.1",
                "KAIROS_API_PORT": str(port),
                "KAIROS_API_WORKERS": "1",
                "KAIROS_METRICS_PORT": "0",
            },
        )
        proc.ports["api"] = port
        proc.ready_url = f"http://127.0.0.1:{port}/readyz"
        return proc

    def scheduler(self, name: str, region: RegionEnv) -> Proc:
        metrics = free_port()
        proc = self._spawn(
            name,
            region,
            "scheduler",
            [*kairos_command(), "scheduler"],
            {"KAIROS_METRICS_HOST": "127.0.0.1", "KAIROS_METRICS_PORT": str(metrics)},
        )
        proc.ports["metrics"] = metrics
        proc.ready_url = f"http://127.0.0.1:{metrics}/readyz"
        return proc

    def executor(self, name: str, region: RegionEnv) -> Proc:
        grpc_port, metrics = free_port(), free_port()
        proc = self._spawn(
            name,
            region,
            "executor",
            [*kairos_command(), "executor"],
            {
                "KAIROS_GRPC_HOST": "127.0.0.1",
                "KAIROS_GRPC_PORT": str(grpc_port),
                "KAIROS_METRICS_HOST": "127.0.0.1",
                "KAIROS_METRICS_PORT": str(metrics),
            },
        )
        proc.ports.update(grpc=grpc_port, metrics=metrics)
        proc.ready_url = f"http://127.0.0.1:{metrics}/readyz"
        return proc

    def worker(
        self,
        name: str,
        region: RegionEnv,
        *,
        executor: Proc,
        api_key: str,
        pool: str,
        concurrency: int,
        lease_s: float,
        work_s: float,
    ) -> Proc:
        runs = self.directory / f"{name}.runs"
        runs.touch()
        args = [
            sys.executable,
            "-m",
            "app.drill.tenant_worker",
            "--pool",
            pool,
            "--addr",
            f"127.0.0.1:{executor.ports['grpc']}",
            "--runs",
            str(runs),
            "--worker-id",
            name,
            "--concurrency",
            str(concurrency),
            "--lease-seconds",
            str(lease_s),
            "--work-s",
            str(work_s),
        ]
        proc = self._spawn(name, region, "worker", args, {"KAIROS_API_KEY": api_key})
        proc.runs_path, proc.worker_id = runs, name
        return proc

    async def wait_ready(self, procs: list[Proc] | None = None, *, timeout_s: float = READY_TIMEOUT_S_DEFAULT) -> None:
        """Every process's /readyz answers 200 (a process that exits first fails the drill)."""
        pending = [p for p in (procs if procs is not None else self.procs) if p.ready_url]
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while pending:
                for proc in list(pending):
                    if not proc.alive():
                        raise RuntimeError(
                            f"{proc.name} exited at start (code {proc.popen.returncode}):\n{self.log_tail(proc)}"
                        )
                    with contextlib.suppress(httpx.HTTPError):
                        assert proc.ready_url is not None
                        if (await client.get(proc.ready_url)).status_code == 200:
                            pending.remove(proc)
                if pending and time.monotonic() > deadline:
                    raise TimeoutError(f"not ready within {timeout_s:.0f} s: {', '.join(p.name for p in pending)}")
                if pending:
                    await asyncio.sleep(0.2)

    # -- faults -------------------------------------------------------------------------------

    def kill(self, proc: Proc) -> None:
        """SIGKILL the process and anything it started: it gets no chance to hand anything back."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=STOP_GRACE_S_DEFAULT)
        log.info("drill process killed", extra={"proc": proc.name, "pid": proc.pid})

    def pause(self, proc: Proc) -> None:
        os.killpg(proc.pid, signal.SIGSTOP)

    def resume(self, proc: Proc) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)

    def in_region(self, region: str, role: str | None = None) -> list[Proc]:
        return [p for p in self.procs if p.region == region and (role is None or p.role == role)]

    # -- teardown -----------------------------------------------------------------------------

    def close(self, *, grace_s: float = STOP_GRACE_S_DEFAULT) -> None:
        """Stop every process: SIGCONT (a paused one must see the SIGTERM), SIGTERM, SIGKILL after the grace."""
        for proc in self.procs:
            if proc.alive():
                self.resume(proc)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=grace_s)
        for handle in self._logs:
            handle.close()
        self._logs.clear()

    def log_tail(self, proc: Proc, lines: int = 15) -> str:
        try:
            return "\n".join(proc.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
