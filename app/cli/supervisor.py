"""`kairos up`: every tier as a child process on one machine, supervised.

The parent starts (or joins) the embedded PostgreSQL, applies migrations, makes sure the
`demo` tenant exists, then runs `kairos api`, `kairos scheduler` and `kairos executor` as
children pointed at the same database. A child that dies is restarted with backoff; SIGINT or
SIGTERM stops the children gracefully (SIGTERM, then SIGKILL after a grace period) and, last,
the embedded database.

Ports: the API and gRPC ports are bound and released once before anything starts and again just
before the children do; one held by another process ends `kairos up` at once, exit code 1, with
one line: `error: port HOST:PORT in use (KAIROS_API_PORT)`. Readiness counts only answers from
our own children: each run has a random token (KAIROS_SUPERVISOR_TOKEN, passed to the children)
that the API answers on /healthz and the executor on its gRPC port, so a probe that reaches some
other process on one of those ports is not taken for Kairos. A child that exits before Kairos is
up ends `kairos up` with its reason (the port line when another process holds its port, else its
exit code and the last line of its log); later, a child whose port another process took while it
was down is not restarted (no restart could bind it), the others are.

Self-healing (docs/operations.md): besides restarting children that exit, the supervisor
- health-checks each child every ``health_interval_s``: the API on its ``/healthz`` (its port is
  not optional), the scheduler and executor by a heartbeat file each touches every second while its
  event loop and watched loops run (KAIROS_UP_HEARTBEAT_FILE, holding this run's token). Not their
  metrics ports: those are optional (KAIROS_METRICS_PORT=0) and another process may hold one. Once a
  child has been seen alive since its start, it is SIGKILLed and restarted when no sign of life came
  for KAIROS_UP_LIVENESS_TIMEOUT_S: a stopped process or a wedged event loop gives none;
- watches the embedded PostgreSQL's postmaster and starts it again, with backoff, when it died;
  the children are not restarted for it, they reconnect by themselves;
- counts both in ``kairos_supervisor_restarts_total{tier, reason}``, served with its own
  ``/healthz`` and ``/readyz`` on the metrics port after the executor's (``up`` in the banner).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from app import observability
from app.cli._demo import DemoTenant, demo_allow_list, ensure_demo_tenant, submit_demo_job
from app.cli._up_ports import (
    StartFailed,
    check_ports,
    installation_ports,
    metrics_ports,
    metrics_urls,
    port_problem,
    ports,
)
from app.cli.oidc_keys import ensure_key
from app.cli.runtime import database_url
from app.config import Settings
from app.duties import supervise
from app.observability.probes import serve_probes
from app.rpc import server as rpc_server
from app.store import Database, embedded, migrate, sealing

log = logging.getLogger(__name__)

# Named here for their users (`kairos up`'s tests): why it could not start, and how it is run.
__all__ = ["TIERS", "Child", "StartFailed", "Supervisor", "SupervisorConfig", "run_all"]
TIERS = ("api", "scheduler", "executor")


@dataclass(frozen=True)
class SupervisorConfig:
    ready_timeout_s: float = 60.0
    grace_s: float = 10.0
    restart_backoff_s: float = 1.0
    restart_backoff_max_s: float = 30.0
    # Health checks: how often, how long one may take, and how long without a 200 makes a child wedged.
    health_interval_s: float = 1.0
    probe_timeout_s: float = 2.0
    liveness_timeout_s: float = 10.0
    # A scheduler or executor touches its heartbeat file from its first second, before it opens the
    # database: one that has given no sign of life this long after its start is wedged too.
    startup_grace_s: float = 30.0
    # A heartbeat file older than this is no sign of life (it is touched every second).
    heartbeat_stale_s: float = 3.0
    # The embedded PostgreSQL: how often its postmaster is looked at, and the backoff between restarts.
    database_check_s: float = 0.5
    database_backoff_s: float = 0.5
    database_backoff_max_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Settings) -> SupervisorConfig:
        return cls(liveness_timeout_s=settings.up_liveness_timeout_s)


@dataclass
class Child:
    name: str
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    backoff_s: float = 1.0
    started_at: float = field(default=0.0)
    log_offset: int = 0  # where this start's output begins in log_path
    # When its health check last answered 200 since this start; None: not yet (not checked until it has).
    healthy_at: float | None = None
    last_probe: str = ""  # what the latest failed check saw
    probe_timed_out: bool = False  # the latest check reached a listener that did not answer (stopped, wedged)
    wedged: bool = False  # this start ended in our SIGKILL for not answering


def last_log_line(child: Child) -> str:
    """The last line the child's current run wrote (a JSON record's message), for an exit's reason."""
    try:
        with open(child.log_path, "rb") as log_file:
            log_file.seek(child.log_offset)
            tail = log_file.read()[-8192:].decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    try:
        record = json.loads(lines[-1])
    except ValueError:
        record = None
    line = str(record["msg"]) if isinstance(record, dict) and "msg" in record else lines[-1]
    return line.removeprefix("error: ")[:300]


class Supervisor:
    def __init__(self, settings: Settings, url: str, config: SupervisorConfig, extra_env: dict[str, str]) -> None:
        self.settings = settings
        self.url = url
        self.config = config
        logs = settings.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.children = [Child(name, logs / f"{name}.log", backoff_s=config.restart_backoff_s) for name in TIERS]
        self.token = secrets.token_hex(16)
        self.env = {
            **os.environ,
            "KAIROS_DATABASE_URL": url,
            **extra_env,
            "KAIROS_SUPERVISOR_TOKEN": self.token,
            "KAIROS_INSTALLATION_PORTS": ",".join(map(str, installation_ports(settings, url))),
        }
        self.ports = ports(settings)
        self.stopping = False
        # The embedded server's data directory when we run one (KAIROS_DATABASE_URL unset), else None.
        self.pgdata = settings.pgdata if not settings.database_url else None
        self.database_down_since: float | None = None

    def heartbeat_file(self, child: Child) -> Path | None:
        """Where the scheduler or executor shows it is alive (None: the API, checked on its port)."""
        return None if child.name == "api" else self.settings.home / "run" / f"{child.name}.heartbeat"

    def start(self, child: Child) -> None:
        out = open(child.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        child.log_offset = out.tell()
        env = {**self.env, "KAIROS_METRICS_PORT": str(metrics_ports(self.settings)[child.name])}
        if (beat := self.heartbeat_file(child)) is not None:
            beat.parent.mkdir(parents=True, exist_ok=True)
            beat.unlink(missing_ok=True)  # the previous start's file is no sign of this one's life
            env["KAIROS_UP_HEARTBEAT_FILE"] = str(beat)
        child.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", child.name],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        child.started_at = time.monotonic()
        child.healthy_at = None
        child.wedged = False
        log.info("child started", extra={"tier": child.name, "pid": child.proc.pid})

    async def port_taken(self, child: Child) -> str | None:
        """For a child that exited: the port line if another process holds its port now."""
        assert child.proc is not None
        # Its own leftovers first (the api's worker processes): the child led its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        if child.name not in self.ports:
            return None
        deadline = time.monotonic() + 2.0  # killed leftovers release the port within milliseconds
        while (problem := port_problem(*self.ports[child.name])) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # a port held by another process wakes no event of ours
        return problem

    async def start_failure(self, child: Child) -> str:
        """The line reporting a child that exited before Kairos was up."""
        assert child.proc is not None
        if problem := await self.port_taken(child):
            return problem
        reason = last_log_line(child)
        return (
            f"{child.name} exited with code {child.proc.returncode} during start-up"
            + (f": {reason}" if reason else "")
            + f" (log: {child.log_path})"
        )

    async def watch(self) -> None:
        """Restart children that exit while we are not stopping; StartFailed for one whose port another
        process holds now."""
        while not self.stopping:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is not None and not self.stopping:
                    code = child.proc.returncode
                    if problem := await self.port_taken(child):
                        log.error(
                            "child exited and another process holds its port; not restarting",
                            extra={"tier": child.name, "code": code},
                        )
                        raise StartFailed(problem)
                    if time.monotonic() - child.started_at > 60:
                        child.backoff_s = self.config.restart_backoff_s
                    reason = "unresponsive" if child.wedged else "exited"
                    log.warning(
                        "child exited; restarting",
                        extra={
                            "tier": child.name,
                            "code": code,
                            "reason": reason,
                            "in_s": child.backoff_s,
                            "restarts": child.restarts + 1,
                        },
                    )
                    if not child.wedged:  # a wedged one was counted when it was killed
                        observability.supervisor_restarts.add(1, {"tier": child.name, "reason": reason})
                    await asyncio.sleep(child.backoff_s)
                    child.backoff_s = min(self.config.restart_backoff_max_s, child.backoff_s * 2)
                    child.restarts += 1
                    if not self.stopping:
                        self.start(child)
            await asyncio.sleep(0.2)

    def beat_problem(self, child: Child, beat: Path) -> str | None:
        """None when ``child``'s heartbeat file is this run's and fresh; else what is wrong with it. A missing
        or stale file counts like a probe that got no answer (silent_since)."""
        child.probe_timed_out = True
        try:
            age = time.time() - beat.stat().st_mtime
            owner = beat.read_text().split()
        except (OSError, UnicodeDecodeError):
            return f"{beat}: no heartbeat yet"
        assert child.proc is not None
        if owner != [self.token, str(child.proc.pid)]:
            return f"{beat}: not written by this run's {child.name}"
        if age > self.config.heartbeat_stale_s:
            return f"{beat}: last heartbeat {age:.1f} s ago"
        child.probe_timed_out = False
        return None

    async def probe(self, child: Child, client: httpx.AsyncClient) -> str | None:
        """None when ``child`` shows it is our own, healthy child; else what its check saw."""
        if (beat := self.heartbeat_file(child)) is not None:
            return self.beat_problem(child, beat)
        url = f"{self.settings.api_url}/healthz"
        child.probe_timed_out = False
        try:
            answer = await client.get(url, timeout=self.config.probe_timeout_s)
            body = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            child.probe_timed_out = isinstance(exc, httpx.TimeoutException)
            return f"{url}: {type(exc).__name__}"
        if not isinstance(body, dict) or body.get("supervisorToken") != self.token:
            return f"{url}: not answered by this run's {child.name}"
        return None if answer.status_code == 200 else f"{url}: {answer.status_code} {body.get('reason', '')}".strip()

    def silent_since(self, child: Child) -> float | None:
        """Since when ``child``'s silence counts: its last sign of life; or, for a tier that beats from its
        start and has not, the end of the start-up grace. None while it may still be starting (the API
        waits for the database before it serves its port), or when its port is simply not ours (taken by
        another process, which it tolerates)."""
        if child.healthy_at is not None:
            return child.healthy_at
        if child.probe_timed_out and self.heartbeat_file(child) is not None:  # it beats from its first second
            return child.started_at + self.config.startup_grace_s - self.config.liveness_timeout_s
        return None

    def kill_wedged(self, child: Child, silent_s: float) -> None:
        assert child.proc is not None
        log.error(
            "child unresponsive; killing and restarting it",
            extra={
                "tier": child.name,
                "pid": child.proc.pid,
                "silent_s": round(silent_s, 1),
                "probe": child.last_probe,
            },
        )
        observability.supervisor_restarts.add(1, {"tier": child.name, "reason": "unresponsive"})
        child.wedged = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)  # works on a stopped process too; watch() restarts it

    async def check_health(self) -> None:
        """Health-check every running child; SIGKILL one that answered once and then stopped answering."""
        async with httpx.AsyncClient() as client:
            while not self.stopping:
                running = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
                answers = await asyncio.gather(*(self.probe(c, client) for c in running))
                now = time.monotonic()
                for child, problem in zip(running, answers, strict=True):
                    if problem is None:
                        if child.healthy_at is None and child.proc is not None:
                            log.info("child healthy", extra={"tier": child.name, "pid": child.proc.pid})
                        child.healthy_at = now
                        continue
                    child.last_probe = problem
                    since = self.silent_since(child)
                    if (
                        since is not None
                        and now - since > self.config.liveness_timeout_s
                        and not self.stopping
                        and child.proc is not None
                        and child.proc.poll() is None
                    ):
                        self.kill_wedged(child, now - since)
                        child.healthy_at = None
                await asyncio.sleep(self.config.health_interval_s)

    async def watch_database(self) -> None:
        """Start the embedded PostgreSQL again, with backoff, whenever its postmaster is gone."""
        pgdata = self.pgdata
        if pgdata is None:
            return
        delay = self.config.database_backoff_s
        while not self.stopping:
            if embedded.postmaster(pgdata) is not None:
                if self.database_down_since is not None:  # back (a start that timed out may finish later)
                    down_s = time.monotonic() - self.database_down_since
                    self.database_down_since, delay = None, self.config.database_backoff_s
                    observability.supervisor_restarts.add(1, {"tier": "postgres", "reason": "exited"})
                    log.warning(
                        "embedded PostgreSQL restarted; the tiers reconnect by themselves",
                        extra={"down_s": round(down_s, 2)},
                    )
                await asyncio.sleep(self.config.database_check_s)
                continue
            if self.database_down_since is None:
                self.database_down_since = time.monotonic()
                log.error("embedded PostgreSQL is not running; restarting it", extra={"pgdata": str(pgdata)})
            try:
                await asyncio.to_thread(embedded.restart, pgdata)
            except Exception as exc:  # noqa: BLE001 - pg_ctl failed: an old backend may still hold its shared memory
                log.warning(
                    "embedded PostgreSQL did not start; retrying",
                    extra={"error": str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__, "in_s": delay},
                )
                await asyncio.sleep(delay)
                delay = min(self.config.database_backoff_max_s, delay * 2)

    async def readiness(self) -> str | None:
        """What `kairos up`'s own /readyz says: None when the database runs and every child answered."""
        if self.database_down_since is not None:
            return "the embedded PostgreSQL is down; restarting it"
        for child in self.children:
            if child.proc is None or child.proc.poll() is not None:
                return f"{child.name} is not running"
            if child.healthy_at is None:
                return f"{child.name} has not answered its health check since it started"
        return None

    def stop(self) -> None:
        """SIGTERM every child, SIGKILL one that outlives the grace period, then whatever is left of each
        child's process group (the API's worker processes): nothing we started survives us."""
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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)  # the child led its group (start_new_session)

    async def api_ready(self, client: httpx.AsyncClient) -> bool:
        """Our API (it answers this run's token) is up and its database reachable and migrated."""
        api = self.settings.api_url
        try:
            health = await client.get(f"{api}/healthz")
            body = health.json() if health.status_code == 200 else None
            if not isinstance(body, dict) or body.get("supervisorToken") != self.token:
                return False  # not up yet, or another process holds the port
            return (await client.get(f"{api}/readyz")).status_code == 200
        except (httpx.HTTPError, ValueError):
            return False

    async def executor_ready(self) -> bool:
        """Our executor (it answers this run's token) serves the gRPC port."""
        return await rpc_server.supervisor_token(self.settings.grpc_addr, timeout_s=1.0) == self.token

    async def wait_ready(self) -> None:
        """Return once our own API and executor answer; StartFailed if a child exits first, or on timeout."""
        s = self.settings
        deadline = time.monotonic() + self.config.ready_timeout_s
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                for child in self.children:
                    if child.proc and child.proc.poll() is not None:
                        raise StartFailed(await self.start_failure(child))
                if await self.api_ready(client) and await self.executor_ready():
                    return
                await asyncio.sleep(0.2)
        raise StartFailed("Kairos did not become ready in time; see the logs under " + str(s.home / "logs"))


def run_all(settings: Settings, *, demo: bool = False, config: SupervisorConfig | None = None) -> int:
    config = config or SupervisorConfig.from_settings(settings)
    observability.setup_logging(settings.log_level, "text", "up")
    observability.setup_metrics("up", otlp_endpoint=settings.otlp_endpoint, otlp_interval_s=settings.otlp_interval_s)
    # Every series from the start, at 0: a scrape (and a rate() over it) sees the counter before the first restart.
    for tier in TIERS:
        for reason in ("exited", "unresponsive"):
            observability.supervisor_restarts.add(0, {"tier": tier, "reason": reason})
    if not settings.database_url:
        observability.supervisor_restarts.add(0, {"tier": "postgres", "reason": "exited"})
    console = Console(highlight=False)
    try:
        check_ports(settings)  # before anything starts: no database, no children
    except StartFailed as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    settings.home.mkdir(parents=True, exist_ok=True)
    url = database_url(settings)
    extra_env = {"KAIROS_LOG_FORMAT": settings.log_format}
    if not settings.database_url and not settings.secret_key:
        # The children get the embedded server's URL, so they would ask for KAIROS_SECRET_KEY: hand them the
        # key the embedded mode keeps in KAIROS_HOME (made here if it is the first run).
        sealing.keyring_for(settings)
        extra_env["KAIROS_SECRET_KEY"] = (settings.home / sealing.KEY_FILE).read_text().strip()
    if demo:
        extra_env["KAIROS_DEMO"] = "1"
        extra_env["KAIROS_HTTP_EGRESS_ALLOW"] = demo_allow_list(settings)

    async def prepare() -> DemoTenant:
        db = Database.from_settings(settings, url, name="up", bounded=False)  # migrations: no statement timeout
        try:
            await migrate.upgrade(db)
            await ensure_key(db)  # the identity tokens' first signing key (app.cli.oidc_keys)
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
        check_ports(settings)  # again: starting the database took a while
        probes = None
        if port := metrics_ports(settings)["up"]:

            async def metrics() -> bytes:
                return observability.exposition()

            probes = await serve_probes(
                settings.metrics_host,
                port,
                metrics=metrics,
                ready=sup.readiness,
                token=sup.token,
                metrics_token=settings.metrics_token,
            )
        for child in sup.children:
            sup.start(child)
        await sup.wait_ready()
        # The demo job before the banner: a refused one ends `kairos up` before it says it is up.
        created = await submit_demo_job(settings, key) if demo else None
        where = "embedded PostgreSQL in " + str(settings.pgdata) if not settings.database_url else "KAIROS_DATABASE_URL"
        console.print(
            f"[bold]Kairos is up[/]\n"
            f"  API       {settings.api_url}   (OpenAPI: {settings.api_url}/schema)\n"
            f"  gRPC      {settings.grpc_addr}\n"
            f"  metrics   {metrics_urls(settings)}\n"
            f"  database  {where}\n"
            f"  logs      {settings.home / 'logs'}\n"
            f"  demo key  {key}\n"
            f"  signing   {demo_tenant.signing_secret}   (the demo tenant's HTTP signing secret)\n"
            f"Try:  curl -H 'Authorization: Bearer {key}' {settings.api_url}/v1/jobs\n"
            f"Stop with Ctrl-C.",
            soft_wrap=True,
        )
        if created is not None:
            console.print(f"demo job submitted: {json.dumps(created)}")
        watcher = asyncio.create_task(sup.watch(), name="supervisor-watch")
        duties = [
            asyncio.create_task(supervise("supervisor-health", sup.check_health, stop), name="supervisor-health"),
            asyncio.create_task(supervise("supervisor-database", sup.watch_database, stop), name="supervisor-database"),
        ]
        stopped = asyncio.create_task(stop.wait(), name="supervisor-stop")
        done, _ = await asyncio.wait([watcher, stopped], return_when=asyncio.FIRST_COMPLETED)
        sup.stopping = True
        for task in (watcher, stopped, *duties):
            task.cancel()
        await asyncio.gather(*duties, return_exceptions=True)
        if probes is not None:
            probes.close()
        if watcher in done:
            watcher.result()  # StartFailed: a tier cannot be brought back

    try:
        asyncio.run(main())
    except StartFailed as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except Exception as exc:  # an unexpected failure: its line, and no child left behind
        log.debug("kairos up failed", exc_info=True)
        sys.stderr.write(f"error: {type(exc).__name__}: {exc}\n")
        return 1
    finally:
        sup.stop()
    console.print("Kairos stopped.")
    return 0
