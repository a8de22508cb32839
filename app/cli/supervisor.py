"""`kairos up`: every tier as a child process on one machine, supervised.

The parent starts (or joins) the embedded PostgreSQL, applies migrations, makes sure the
`demo` tenant exists, then runs `kairos api`, `kairos scheduler` and `kairos executor` as
children pointed at the same database. A child that dies is restarted with backoff; SIGINT or
SIGTERM stops the children gracefully (SIGTERM, then SIGKILL after a grace period) and, last,
the embedded database.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from app import observability
from app.cli.runtime import database_url
from app.config import Settings
from app.store import Database, Store, migrate

log = logging.getLogger(__name__)
TIERS = ("api", "scheduler", "executor")
DEMO_TENANT = "demo"


@dataclass(frozen=True)
class SupervisorConfig:
    ready_timeout_s: float = 60.0
    grace_s: float = 10.0
    restart_backoff_s: float = 1.0
    restart_backoff_max_s: float = 30.0


@dataclass
class Child:
    name: str
    log_path: Path
    proc: subprocess.Popen | None = None
    restarts: int = 0
    backoff_s: float = 1.0
    started_at: float = field(default=0.0)


@dataclass(frozen=True)
class DemoTenant:
    key: str  # its API key (Bearer), for REST and gRPC
    signing_secret: str  # keys the Kairos-Signature header of its HTTP deliveries


async def ensure_demo_tenant(db: Database, home: Path) -> DemoTenant:
    """The demo tenant's key and signing secret; the key is kept in KAIROS_HOME/demo.key (0600) because
    only its hash is stored."""
    key_file = home / "demo.key"

    async def work(tx: Store) -> DemoTenant:
        tenant = await tx.tenants.get_by_name(DEMO_TENANT)
        if tenant is None:
            created = await tx.tenants.create(DEMO_TENANT)
            assert created is not None
            return DemoTenant(created[1], created[0].signing_secret)
        if key_file.exists():
            key = key_file.read_text().strip()
            principal = await tx.tenants.resolve_key(key)
            if principal is not None and principal.tenant_id == tenant.tenant_id:
                return DemoTenant(key, tenant.signing_secret)
        key, _ = await tx.tenants.rotate_key(tenant.tenant_id)
        return DemoTenant(key, tenant.signing_secret)

    demo = await db.transaction(work)
    key_file.write_text(demo.key + "\n")
    key_file.chmod(0o600)
    return demo


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class Supervisor:
    def __init__(self, settings: Settings, url: str, config: SupervisorConfig, extra_env: dict[str, str]) -> None:
        self.settings = settings
        self.url = url
        self.config = config
        logs = settings.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.children = [Child(name, logs / f"{name}.log", backoff_s=config.restart_backoff_s) for name in TIERS]
        self.env = {**os.environ, "KAIROS_DATABASE_URL": url, **extra_env}
        self.stopping = False

    def start(self, child: Child) -> None:
        out = open(child.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        child.proc = subprocess.Popen([sys.executable, "-m", "app.cli", child.name], env=self.env,
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        child.started_at = time.monotonic()
        log.info("child started", extra={"tier": child.name, "pid": child.proc.pid})

    async def watch(self) -> None:
        """Restart children that exit while we are not stopping."""
        while not self.stopping:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is not None and not self.stopping:
                    code = child.proc.returncode
                    if time.monotonic() - child.started_at > 60:
                        child.backoff_s = self.config.restart_backoff_s
                    log.warning("child exited; restarting", extra={
                        "tier": child.name, "code": code, "in_s": child.backoff_s, "restarts": child.restarts + 1})
                    await asyncio.sleep(child.backoff_s)
                    child.backoff_s = min(self.config.restart_backoff_max_s, child.backoff_s * 2)
                    child.restarts += 1
                    if not self.stopping:
                        self.start(child)
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        self.stopping = True
        for child in self.children:
            if child.proc and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace_s
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("child ignored SIGTERM; killing", extra={"tier": child.name})
                child.proc.kill()
                child.proc.wait()

    async def wait_ready(self) -> None:
        s = self.settings
        deadline = time.monotonic() + self.config.ready_timeout_s
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                for child in self.children:
                    if child.proc and child.proc.poll() is not None:
                        raise RuntimeError(f"{child.name} exited with {child.proc.returncode}; see {child.log_path}")
                try:
                    api_ok = (await client.get(f"{s.api_url}/readyz")).status_code == 200
                except httpx.HTTPError:
                    api_ok = False
                if api_ok and _port_open(s.grpc_host, s.grpc_port):
                    return
                await asyncio.sleep(0.2)
        raise RuntimeError("Kairos did not become ready in time; see the logs under " + str(s.home / "logs"))


async def submit_demo_job(settings: Settings, key: str) -> dict[str, object]:
    body = {"name": "demo-echo", "target": {"type": "http", "ref": f"{settings.api_url}/demo/echo"},
            "payload": {"hello": "from kairos up --demo"}, "schedule": {"delaySeconds": 3}}
    async with httpx.AsyncClient(timeout=5.0) as client:
        resp = await client.post(f"{settings.api_url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"})
        resp.raise_for_status()
        return resp.json()


def run_all(settings: Settings, *, demo: bool = False, config: SupervisorConfig = SupervisorConfig()) -> int:
    observability.setup_logging(settings.log_level, "text", "up")
    console = Console(highlight=False)
    settings.home.mkdir(parents=True, exist_ok=True)
    url = database_url(settings)
    extra_env = {"KAIROS_LOG_FORMAT": settings.log_format}
    if demo:
        extra_env["KAIROS_DEMO"] = "1"
        if not settings.http_egress_allow:
            extra_env["KAIROS_HTTP_EGRESS_ALLOW"] = "127.0.0.1"

    async def prepare() -> DemoTenant:
        db = Database.from_settings(settings, url)
        try:
            await migrate.upgrade(db)
            return await ensure_demo_tenant(db, settings.home)
        finally:
            await db.close()

    demo_tenant = asyncio.run(prepare())
    key = demo_tenant.key
    sup = Supervisor(settings, url, config, extra_env)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        for child in sup.children:
            sup.start(child)
        await sup.wait_ready()
        where = "embedded PostgreSQL in " + str(settings.pgdata) if not settings.database_url else "KAIROS_DATABASE_URL"
        console.print(f"[bold]Kairos is up[/]\n"
                      f"  API       {settings.api_url}   (OpenAPI: {settings.api_url}/schema)\n"
                      f"  gRPC      {settings.grpc_addr}\n"
                      f"  database  {where}\n"
                      f"  logs      {settings.home / 'logs'}\n"
                      f"  demo key  {key}\n"
                      f"  signing   {demo_tenant.signing_secret}   (the demo tenant's HTTP signing secret)\n"
                      f"Try:  curl -H 'Authorization: Bearer {key}' {settings.api_url}/v1/jobs\n"
                      f"Stop with Ctrl-C.", soft_wrap=True)
        if demo:
            created = await submit_demo_job(settings, key)
            console.print(f"demo job submitted: {json.dumps(created)}")
        watcher = asyncio.create_task(sup.watch(), name="supervisor-watch")
        await stop.wait()
        sup.stopping = True
        watcher.cancel()

    try:
        asyncio.run(main())
    except RuntimeError as exc:
        console.print(f"[red]error:[/] {exc}")
        sup.stop()
        return 1
    sup.stop()
    console.print("Kairos stopped.")
    return 0
