"""The end-to-end herd benchmark: the user's path, every tier its own process.

    .venv/bin/python loadtest/herd.py [--scenarios herd100k,herd10k,mixed,light,steady,short,submit]
                                      [--workers 2] [--worker-concurrency 256] [--lease-batch 128] ...

Starts a fresh embedded PostgreSQL (pgserver, in a temporary directory; or a server given by
--database-url), and for every scenario a fresh database on it with `kairos api`,
`kairos scheduler` and `kairos executor` as separate subprocesses of the installed CLI, plus SDK
worker processes (each an SDK ``Worker`` with a no-op handler) serving one shared pool that every
tenant of the scenario targets. Jobs are submitted through the REST API (POST /v1/jobs) by an
asyncio HTTP/1.1 keep-alive client; every figure is read back from the database (its clock):

  start lag     attempts.leased_at of attempt 1 minus the occurrence's due time (jobs.run_at, or
                scheduled_for plus the job's stable jitter offset for cron jobs)
  dispatch lag  executions.dispatched_at minus the due time
  drain         occurrences started / (last start - T)

Prints one table (figure, target, measured, pass/fail) and writes the raw numbers to
loadtest/results/herd-<UTC timestamp>.json. Exit code: 0 when every scenario ran and lost nothing
and duplicated nothing, 1 otherwise (with --strict also when a performance target is missed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from app.domain.schedule import jitter_offset_s  # noqa: E402
from app.executor import pools as shared_pools  # noqa: E402
from app.store import (  # noqa: E402
    Store,  # noqa: E402
    embedded,
    migrate,
    sealing,
)
from app.store.db import Database, create_engine  # noqa: E402

POOL = "herd"
import http_herd  # noqa: E402  (beside this file: the HTTP-target scenarios)
import lived_bench  # noqa: E402  (beside this file: the lived-database scenario)
import reference  # noqa: E402  (beside this file: pgqueuer, the worker-pool herds' reference arm)

ALL_SCENARIOS = (
    "herd100k",
    "herd10k",
    "herd31k",
    "mixed",
    "light",
    "steady",
    "short",
    "submit",
    "command",
    "memory",
    *http_herd.SCENARIOS,
    *lived_bench.SCENARIOS,
)
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- command line ------------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default=",".join(ALL_SCENARIOS), help="comma-separated, run in this order")
    g = p.add_argument_group("processes")
    g.add_argument("--workers", type=int, default=2, help="SDK worker processes")
    g.add_argument(
        "--executors",
        type=int,
        default=2,
        help="`kairos executor` processes, each on its own port; worker i leases from executor i mod N",
    )
    g.add_argument("--worker-concurrency", type=int, default=256, help="handlers in flight per worker process")
    g.add_argument("--lease-batch", type=int, default=128, help="executions per Lease call")
    g.add_argument(
        "--report-s",
        type=float,
        default=None,
        help="SDK workers' report_s: how long outcomes are buffered for one CompleteMany (default: the SDK's)",
    )
    g.add_argument(
        "--api-workers",
        type=int,
        help="API processes (KAIROS_API_WORKERS; default: what `kairos api` starts by itself)",
    )
    g.add_argument("--log-level", default="INFO", help="KAIROS_LOG_LEVEL of every tier (INFO is the default)")
    g.add_argument(
        "--tier-env",
        action="append",
        default=[],
        metavar="KAIROS_X=V",
        help="extra environment for the tiers (repeatable)",
    )
    g.add_argument("--max-inflight", type=int, help="set every tenant's max_inflight quota (default: Kairos's)")
    g.add_argument(
        "--max-dispatch-per-s", type=int, help="set every tenant's max_dispatch_per_s quota (default: Kairos's)"
    )
    g = p.add_argument_group("load generator")
    g.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: minimal keep-alive HTTP/1.1 client over asyncio streams; httpx: httpx.AsyncClient",
    )
    g.add_argument("--submit-concurrency", type=int, default=16, help="clients submitting a scenario's jobs")
    g.add_argument("--lead-min", type=float, default=5.0, help="least seconds between the end of the submits and T")
    g = p.add_argument_group("scenario sizes")
    g.add_argument("--command-jobs", type=int, default=2000, help="command: jobs due at T for `kairos worker -- true`")
    g.add_argument("--command-workers", type=int, default=2, help="command: `kairos worker` processes")
    g.add_argument("--command-concurrency", type=int, default=16, help="command: concurrency of each")
    g.add_argument(
        "--command-rounds",
        type=int,
        default=3,
        help="command: herds, each between two asyncio baselines; the figure is the median round's",
    )
    g.add_argument("--hog", type=int, default=90_000, help="herd100k: jobs of tenant hog")
    g.add_argument("--small-tenants", type=int, default=100, help="herd100k: small tenants")
    g.add_argument("--small-jobs", type=int, default=100, help="herd100k: jobs per small tenant")
    g.add_argument("--herd31k-hog", type=int, default=30_000, help="herd31k: jobs of tenant hog")
    g.add_argument("--herd31k-small", type=int, default=10, help="herd31k: small tenants of 100 jobs each")
    g.add_argument(
        "--reference",
        choices=("pgqueuer", "none"),
        default="pgqueuer",
        help="herd10k, herd31k, herd100k: run the same herd through pgqueuer beside Kairos",
    )
    g.add_argument(
        "--lived-scale",
        type=float,
        help="lived: the loaded database's size, 1 = 2,000,000 jobs and ~23,000,000 executions "
        "(default: KAIROS_LIVED_SCALE, else 1)",
    )
    g.add_argument(
        "--lived-parts",
        help="lived: which parts, of reads,herd100k,steady,retention,heap (default: KAIROS_LIVED_PARTS, else all)",
    )
    g.add_argument("--herd10k-jobs", type=int, default=10_000)
    g.add_argument("--herd10k-tenants", type=int, default=1)
    g.add_argument("--mixed-a", type=int, default=40_000, help="mixed: jobs of tenant A")
    g.add_argument("--mixed-b", type=int, default=200, help="mixed: jobs of tenant B")
    g.add_argument("--light-burst", type=int, default=50, help="light: jobs due at one instant")
    g.add_argument("--light-spaced", type=int, default=100, help="light: jobs then due one by one")
    g.add_argument("--light-gap-ms", type=float, default=50.0, help="light: gap between the one-by-one jobs")
    g.add_argument("--steady-rate", type=int, default=700, help="steady: occurrences per second")
    g.add_argument("--steady-seconds", type=int, default=120, help="steady: measured window")
    g.add_argument("--short-rate", type=float, default=200.0, help="short: submits per second")
    g.add_argument("--short-seconds", type=float, default=60.0, help="short: how long it submits")
    g.add_argument("--submit-seconds", type=float, default=10.0, help="submit: seconds per phase")
    g.add_argument("--submit-clients", default="4,64", help="submit: concurrent clients per phase")
    g.add_argument("--batch-size", type=int, default=1000, help="submit: jobs per POST /v1/jobs:batch")
    g.add_argument("--batch-clients", type=int, default=4, help="submit: concurrent batch clients")
    g = p.add_argument_group("bounds and output")
    g.add_argument("--deadline", type=float, default=3600.0, help="global time bound, seconds")
    g.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds after the last due time to wait for every start (default 30 + jobs/500)",
    )
    g.add_argument(
        "--explain",
        action="store_true",
        help="print EXPLAIN (ANALYZE, BUFFERS) of the lease statement at the drain midpoint (rolled back)",
    )
    g.add_argument("--keep", action="store_true", help="keep the databases (and the embedded server's data)")
    g.add_argument("--database-url", help="a PostgreSQL server to use instead of a fresh embedded one")
    g.add_argument("--results-dir", default=str(ROOT / "loadtest" / "results"))
    g.add_argument("--strict", action="store_true", help="exit 1 when any target is missed")
    g.add_argument("--seed", type=int, default=7)
    http_herd.add_arguments(p)
    p.add_argument("--worker-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = [s for s in args.scenarios.split(",") if s and s not in ALL_SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(ALL_SCENARIOS)}")
    return args


# -- worker child ------------------------------------------------------------------------------------


def run_worker_child(spec: str) -> None:
    """Child mode: one SDK worker process whose handler does nothing."""
    from kairos_sdk import Worker

    cfg = json.loads(spec)

    async def handler(_execution: Any) -> None:
        return None

    extra = {"report_s": cfg["report_s"]} if cfg.get("report_s") is not None else {}
    Worker(
        cfg["pool"],
        handler,
        addr=cfg["addr"],
        api_key=os.environ["KAIROS_API_KEY"],
        concurrency=cfg["concurrency"],
        batch=cfg["batch"],
        **extra,
    ).run_forever()


# -- numbers -----------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of values (sorted or not); None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def summary(values: list[float]) -> dict[str, Any]:
    s = sorted(values)
    return {
        "n": len(s),
        "min": s[0] if s else None,
        "p50": pct(s, 50),
        "p90": pct(s, 90),
        "p99": pct(s, 99),
        "p999": pct(s, 99.9),
        "max": s[-1] if s else None,
        "mean": sum(s) / len(s) if s else None,
    }


def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f} ms" if abs(v) < 1 else f"{v:.2f} s"


def fmt_rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}/s"


# -- processes ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kairos_command() -> list[str]:
    script = Path(sys.executable).parent / "kairos"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, cpu seconds of the process and its reaped children)."""
    out: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        rest = raw[raw.rfind(b")") + 2 :].split()
        ppid = int(rest[1])
        cpu = sum(int(x) for x in rest[11:15]) / CLK_TCK  # utime stime cutime cstime
        out[int(entry)] = (ppid, cpu)
    return out


def tree_cpu(roots: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds used so far by each named group of process trees."""
    table = _proc_table()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    out = {}
    for name, pids in roots.items():
        total, todo, seen = 0.0, list(pids), set()
        while todo:
            pid = todo.pop()
            if pid in seen or pid not in table:
                continue
            seen.add(pid)
            total += table[pid][1]
            todo.extend(children.get(pid, ()))
        out[name] = total
    return out


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Processes:
    """Every process this run started, each in its own process group; stop() ends them all."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[Proc] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.logdir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def stop(self, procs: Iterable[Proc] | None = None, grace_s: float = 10.0) -> None:
        chosen = list(self.procs if procs is None else procs)
        for p in chosen:
            _signal_group(p.popen, signal.SIGTERM)
        end = time.monotonic() + grace_s
        for p in chosen:
            try:
                p.popen.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in chosen:
            _signal_group(p.popen, signal.SIGKILL)  # also whatever the process left in its group
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs = [p for p in self.procs if p not in chosen]


def _signal_group(popen: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# -- HTTP load generator -----------------------------------------------------------------------------


class RawLane:
    """One keep-alive HTTP/1.1 connection over asyncio streams: a request at a time, no retries."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, method: str, path: str, key: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            self.writer.write(head + body if body else head)
            raw = await self.reader.readuntil(b"\r\n\r\n")
            status = int(raw[9:12])
            length, chunked, close = None, False, False
            for line in raw.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection":
                    close = b"close" in value.lower()
            if chunked:
                data = await self._chunked()
            elif length is not None:
                data = await self.reader.readexactly(length)
            else:
                data, close = await self.reader.read(), True
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            await self.close()
            raise ConnectionError(str(exc) or type(exc).__name__) from None
        if close:
            await self.close()
        return status, data

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        for _ in range(1_000_000):
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                break
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)
        return b"".join(parts)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None


class HttpxLane:
    """The same interface over one shared httpx.AsyncClient (for comparing the generator's cost)."""

    def __init__(self, client: Any, base: str) -> None:
        self.client, self.base = client, base

    async def send(self, method: str, path: str, key: str, body: bytes = b"") -> tuple[int, bytes]:
        import httpx

        try:
            r = await self.client.request(
                method,
                self.base + path,
                content=body or None,
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise ConnectionError(str(exc) or type(exc).__name__) from None
        return r.status_code, r.content

    async def close(self) -> None:
        return None


class Http:
    """Lanes to one API base URL, of the chosen client kind."""

    def __init__(self, kind: str, host: str, port: int) -> None:
        self.kind, self.host, self.port = kind, host, port
        self._httpx: Any = None

    def lane(self) -> RawLane | HttpxLane:
        if self.kind == "raw":
            return RawLane(self.host, self.port)
        if self._httpx is None:
            import httpx

            self._httpx = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=256), timeout=60
            )
        return HttpxLane(self._httpx, f"http://{self.host}:{self.port}")

    async def close(self) -> None:
        if self._httpx is not None:
            await self._httpx.aclose()
            self._httpx = None


@dataclass
class SubmitStats:
    requests: int = 0
    ok_requests: int = 0
    ok_items: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_s: float = 0.0
    first_body: bytes = b""

    def as_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "okRequests": self.ok_requests,
            "okItems": self.ok_items,
            "statuses": self.statuses,
            "errors": self.errors[:5],
            "seconds": round(self.seconds, 3),
            "itemsPerS": self.ok_items / self.seconds if self.seconds else None,
            "latencyS": summary(self.latencies),
            "generatorCpuS": round(self.cpu_s, 3),
            "generatorCpuUsPerRequest": 1e6 * self.cpu_s / self.requests if self.requests else None,
        }


async def submit(
    http: Http,
    make: Callable[[int], tuple[str, bytes]],
    *,
    count: int | None,
    concurrency: int,
    path: str = "/v1/jobs",
    method: str = "POST",
    ok_status: tuple[int, ...] = (201,),
    items_of: Callable[[int, bytes], int] | None = None,
    rate: float | None = None,
    stop_at: float | None = None,
) -> SubmitStats:
    """Send make(i) for i in 0..count-1 (or until stop_at, monotonic) over `concurrency` lanes.

    rate: open-loop pacing (request i is not sent before t0 + i/rate). Only answers in ok_status
    count as successes; items_of(status, body) says how many jobs one successful answer carried.
    """
    stats = SubmitStats()
    nxt = 0
    t0 = time.monotonic()
    cpu0 = time.process_time()

    async def lane_loop() -> None:
        nonlocal nxt
        lane = http.lane()
        try:
            while True:
                i = nxt
                if (count is not None and i >= count) or (stop_at is not None and time.monotonic() >= stop_at):
                    return
                nxt += 1
                if rate:
                    wait = t0 + i / rate - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                key, body = make(i)
                sent = time.monotonic()
                try:
                    status, data = await asyncio.wait_for(lane.send(method, path, key, body), 60)
                except (ConnectionError, TimeoutError) as exc:
                    stats.requests += 1
                    stats.statuses["error"] = stats.statuses.get("error", 0) + 1
                    if len(stats.errors) < 20:
                        stats.errors.append(str(exc))
                    await lane.close()
                    continue
                took = time.monotonic() - sent
                stats.requests += 1
                stats.statuses[str(status)] = stats.statuses.get(str(status), 0) + 1
                if not stats.first_body:
                    stats.first_body = data[:2000] or b"-"
                if status in ok_status:
                    stats.ok_requests += 1
                    stats.ok_items += items_of(status, data) if items_of else 1
                    stats.latencies.append(took)
                elif len(stats.errors) < 20:
                    stats.errors.append(f"{status}: {data[:300].decode(errors='replace')}")
        finally:
            await lane.close()

    await asyncio.gather(*(lane_loop() for _ in range(max(1, concurrency))))
    stats.seconds = time.monotonic() - t0
    stats.cpu_s = time.process_time() - cpu0
    return stats


def job_body(name: str, schedule: dict[str, Any], ref: str = f"shared/{POOL}") -> bytes:
    return json.dumps(
        {"name": name, "target": {"type": "queue", "ref": ref}, "payload": {}, "schedule": schedule},
        separators=(",", ":"),
    ).encode()


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- database ----------------------------------------------------------------------------------------


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def database_of(url: str) -> str:
    """The database a URL names (its path's last part)."""
    return url.partition("?")[0].rsplit("/", 1)[-1]


def with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def lease_statement() -> tuple[str, str] | None:
    """(name, SQL) of the executor's lease statement as the catalogue has it now."""
    from app.store.queries import catalogue

    names = [n for n in catalogue() if n.startswith("Execution") and "Lease" in n]
    if not names:
        return None
    name = "ExecutionLeaseFair" if "ExecutionLeaseFair" in names else sorted(names)[0]
    return name, catalogue()[name].sql


def to_psycopg(sql: str, known: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`:name` parameters -> `%(name)s`; unknown parameters are bound to NULL."""
    import re

    params: dict[str, Any] = {}

    def sub(m: re.Match[str]) -> str:
        params[m.group(1)] = known.get(m.group(1))
        return f"%({m.group(1)})s"

    return re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", sub, sql.replace("%", "%%")), params


class Server:
    """The PostgreSQL server of this run: a fresh embedded one, or --database-url's."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.pg: Any = None
        self._postmaster: int | None = None
        self.created: list[str] = []
        if args.database_url:
            self.url = args.database_url
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver

                self.pg = pgserver.get_server(str(tmp / "pgdata"), cleanup_mode="stop" if args.keep else "delete")
            self.url = embedded.to_sqlalchemy_url(self.pg.get_uri())

    def postmaster_pid(self) -> int | None:
        """The server's postmaster: the embedded one's, or a --database-url server's on this machine (its
        data directory's postmaster.pid readable), so PostgreSQL's CPU is a figure of either."""
        try:
            if self.pg is not None:
                return int(self.pg.get_pid())
            if self._postmaster is None:
                with self.admin() as conn:
                    where = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
                self._postmaster = int((where / "postmaster.pid").read_text().split()[0])
            return self._postmaster or None
        except Exception:  # noqa: BLE001 - a figure we can go without (another machine's server, no rights)
            self._postmaster = 0
            return None

    def settings(self) -> dict[str, str]:
        """The server's version and the settings a lived database's figures depend on."""
        names = ["server_version", "shared_buffers", "max_wal_size", "checkpoint_timeout", "wal_compression"]
        try:
            with self.admin() as conn:
                rows = conn.execute("SELECT n, current_setting(n) FROM unnest(%s::text[]) AS n", (names,)).fetchall()
        except psycopg.Error:
            return {}
        return {str(n): str(v) for n, v in rows}

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(libpq(with_database(self.url, "postgres")), autocommit=True)

    def create(self, label: str) -> str:
        name = f"herd_{label}_{uuid.uuid4().hex[:8]}"
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        self.created.append(name)
        return with_database(self.url, name)

    def drop(self, url: str) -> None:
        if self.args.keep:
            return
        name = database_of(url)
        with self.admin() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        if self.pg is not None:
            try:
                self.pg.cleanup()
            except Exception as exc:  # noqa: BLE001 - best effort at exit
                print(f"stopping the embedded server: {exc}", file=sys.stderr)


# -- one scenario's stack ----------------------------------------------------------------------------


@dataclass
class TenantInfo:
    name: str
    tenant_id: str
    key: str


class Stack:
    """A fresh database, the three tiers and the workers of one scenario."""

    def __init__(
        self,
        run: Run,
        label: str,
        command: list[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        workers: bool = True,
    ) -> None:
        self.run = run
        self.extra_env = env or {}  # the scenario's own tier settings (before --tier-env's)
        self.with_workers = workers  # False: no worker processes (HTTP targets only)
        self.cpu_roots: dict[str, list[int]] = {}  # the scenario's own processes, counted in cpu()
        # None: SDK worker processes with a no-op handler; else `kairos worker -- command` processes.
        self.command = command
        self.label = label
        self.url = ""
        self.db: Database | None = None
        self.conn: psycopg.Connection | None = None
        self.api_port = free_port()
        self.grpc_port = free_port()
        self.tiers: dict[str, Proc] = {}
        self.workers: list[Proc] = []
        self.tenants: dict[str, TenantInfo] = {}
        self.worker_key = ""
        self.http = Http(run.args.client, "127.0.0.1", self.api_port)
        self.api_processes = 1

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
        env.update(
            {
                "KAIROS_HOME": str(self.run.tmp / "home"),
                "KAIROS_DATABASE_URL": self.url,
                "KAIROS_API_PORT": str(self.api_port),
                "KAIROS_GRPC_PORT": str(self.grpc_port),
                "KAIROS_API_HOST": "127.0.0.1",
                "KAIROS_GRPC_HOST": "127.0.0.1",
                "KAIROS_LOG_LEVEL": self.run.args.log_level,
                "PYTHONUNBUFFERED": "1",
                sealing.SECRET_KEY_VARIABLE: os.environ[sealing.SECRET_KEY_VARIABLE],
            }
        )
        env.update(self.extra_env)
        for item in self.run.args.tier_env:
            k, _, v = item.partition("=")
            env[k] = v
        return env

    async def up(self, tenant_names: list[str]) -> None:
        # The tiers must open the signing secrets the tenants below are sealed with (app.store.sealing).
        os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
        self.url = self.run.server.create(self.label)
        self.db = Database(create_engine(self.url, pool_size=2))
        await migrate.upgrade(self.db)
        self.conn = psycopg.connect(libpq(self.url), autocommit=True)
        await self._tenants(tenant_names)
        await self._pool(tenant_names)
        cmd = kairos_command()
        api_argv = [*cmd, "api"]
        env = self.env()
        if self.run.args.api_workers is not None:
            env["KAIROS_API_WORKERS"] = str(self.run.args.api_workers)
        for tier, argv in (("api", api_argv), ("scheduler", [*cmd, "scheduler"]), ("executor", [*cmd, "executor"])):
            self.tiers[tier] = self.run.procs.start(f"{self.label}-{tier}", argv, env)
        grpc_ports = [self.grpc_port]
        for i in range(2, self.run.args.executors + 1):  # replicas: their own gRPC port, no metrics port
            grpc_ports.append(free_port())
            self.tiers[f"executor{i}"] = self.run.procs.start(
                f"{self.label}-executor{i}",
                [*cmd, "executor"],
                dict(env, KAIROS_GRPC_PORT=str(grpc_ports[-1]), KAIROS_METRICS_PORT="0"),
            )
        await self._ready()
        self.api_processes = max(1, self._api_process_count())
        count = self.run.args.workers if self.command is None else self.run.args.command_workers
        count = count if self.with_workers else 0
        for i in range(count):
            addr = f"127.0.0.1:{grpc_ports[i % len(grpc_ports)]}"
            spec = {
                "pool": POOL,
                "addr": addr,
                "concurrency": self.run.args.worker_concurrency,
                "batch": self.run.args.lease_batch,
                "report_s": self.run.args.report_s,
            }
            if self.command is None:
                argv = [sys.executable, str(Path(__file__).resolve()), "--worker-child", json.dumps(spec)]
            else:
                argv = [
                    *cmd,
                    "worker",
                    "--pool",
                    POOL,
                    "--concurrency",
                    str(self.run.args.command_concurrency),
                    "--",
                    *self.command,
                ]
            wenv = dict(env, KAIROS_GRPC_ADDR=addr, KAIROS_API_KEY=self.worker_key)
            self.workers.append(self.run.procs.start(f"{self.label}-worker{i + 1}", argv, wenv))
        await asyncio.sleep(1.5)
        self.check_alive()

    async def _tenants(self, names: list[str]) -> None:
        assert self.db is not None
        args = self.run.args

        async def work(tx: Store) -> list[tuple[Any, str]]:
            out = []
            for n in names:
                created = await tx.tenants.create(n)
                assert created is not None, f"tenant {n} exists"
                if args.max_inflight or args.max_dispatch_per_s:
                    await tx.tenants.set_quota(
                        created[0].tenant_id, max_inflight=args.max_inflight, max_dispatch_per_s=args.max_dispatch_per_s
                    )
                out.append(created)
            return out

        for tenant, key in await self.db.transaction(work):
            self.tenants[tenant.name] = TenantInfo(tenant.name, str(tenant.tenant_id), key)

    async def _pool(self, names: list[str]) -> None:
        allow = [a for n in names for a in ("--allow", n)]
        out = await asyncio.to_thread(
            subprocess.run,
            [*kairos_command(), "pools", "create", POOL, "--shared", *allow, "--json"],
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0 and "exists" in out.stderr + out.stdout:
            # A database kept from an earlier scenario (the lived one): the pool is there; grant this
            # scenario's tenants and take a key of its own, as `kairos pools grant` and `issue-key` do.
            assert self.db is not None
            await shared_pools.grant(self.db, POOL, tuple(names))
            self.worker_key = await shared_pools.issue_key(self.db, POOL)
            return
        if out.returncode != 0:
            raise RuntimeError(f"kairos pools create failed: {out.stderr.strip() or out.stdout.strip()}")
        self.worker_key = json.loads(out.stdout.strip().splitlines()[-1])["workerKey"]

    async def _ready(self, timeout_s: float = 90.0) -> None:
        end = time.monotonic() + timeout_s
        api = grpc = sched = False
        for _ in range(100_000):
            self.check_alive()
            if not api:
                lane = RawLane("127.0.0.1", self.api_port)
                try:
                    status, _ = await asyncio.wait_for(lane.send("GET", "/readyz", ""), 5)
                    api = status == 200
                except (ConnectionError, TimeoutError):
                    pass
                finally:
                    await lane.close()
            if not grpc:
                try:
                    with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1):
                        grpc = True
                except OSError:
                    pass
            if not sched:
                sched = (
                    self.sql1("SELECT count(*) FROM shard_leases WHERE owner IS NOT NULL AND lease_until > now()")
                    == 256
                )
            if api and grpc and sched:
                return
            if time.monotonic() > end:
                raise RuntimeError(
                    f"tiers not ready after {timeout_s:.0f} s (api {api}, executor {grpc}, "
                    f"scheduler owns all shards {sched})"
                )
            await asyncio.sleep(0.2)

    def _api_process_count(self) -> int:
        """Processes serving the API: the children of `kairos api` when it supervises several, else itself."""
        pid = self.tiers["api"].popen.pid
        return max(1, sum(1 for _, (ppid, _) in _proc_table().items() if ppid == pid))

    def check_alive(self) -> None:
        for p in [*self.tiers.values(), *self.workers]:
            if p.popen.poll() is not None:
                raise RuntimeError(f"{p.name} exited with {p.popen.returncode}:\n{p.tail()}")

    def sql(self, query: str, params: Any = None) -> list[tuple]:
        assert self.conn is not None
        return self.conn.execute(query, params).fetchall()

    def sql1(self, query: str, params: Any = None) -> Any:
        rows = self.sql(query, params)
        return rows[0][0] if rows else None

    def cpu(self) -> dict[str, float]:
        roots: dict[str, list[int]] = defaultdict(list)
        for name, p in self.tiers.items():  # executor replicas count as the executor tier
            roots["executor" if name.startswith("executor") else name].append(p.popen.pid)
        roots["workers"] = [w.popen.pid for w in self.workers]
        roots.update(self.cpu_roots)
        pm = self.run.server.postmaster_pid()
        if pm:
            roots["postgres"] = [pm]
        out = tree_cpu(roots)
        out["generator"] = time.process_time()
        return out

    def table_stats(self) -> list[dict[str, Any]]:
        rows = self.sql(
            "SELECT relname, n_live_tup, n_mod_since_analyze, last_analyze, last_autoanalyze, "
            "(SELECT reltuples FROM pg_class c WHERE c.oid = s.relid) "
            "FROM pg_stat_user_tables s WHERE relname IN ('executions', 'attempts', 'due_index', 'jobs')"
        )
        return [
            {
                "table": r[0],
                "liveTuples": r[1],
                "modifiedSinceAnalyze": r[2],
                "lastAnalyze": r[3].isoformat() if r[3] else None,
                "lastAutoanalyze": r[4].isoformat() if r[4] else None,
                "plannerRowEstimate": r[5],
            }
            for r in rows
        ]

    def explain_lease(self) -> str:
        found = lease_statement()
        if found is None:
            return "no Execution*Lease* statement in the catalogue"
        name, sql = found
        known = {
            "queue": f"shared:{POOL}",
            "now": None,
            "limit": self.run.args.lease_batch,
            "salt": "explain",
            "worker_id": "explain",
            "lease_s": 30.0,
            "pool": POOL,
            "skip_tenants": "{}",
        }
        query, params = to_psycopg(sql, known)
        assert self.conn is not None
        try:
            with self.conn.transaction(force_rollback=True):
                # ANALYZE runs it (the leases it takes are rolled back): the time of each plan node.
                plan = self.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + query, params).fetchall()
        except psycopg.Error as exc:
            return f"EXPLAIN {name} failed: {exc}"
        return f"EXPLAIN {name}\n" + "\n".join(r[0] for r in plan)

    def db_counters(self) -> dict[str, int]:
        row = self.sql(
            "SELECT xact_commit, xact_rollback, conflicts, deadlocks FROM pg_stat_database "
            "WHERE datname = current_database()"
        )[0]
        return dict(zip(("commits", "rollbacks", "conflicts", "deadlocks"), (int(x) for x in row)))

    async def down(self) -> None:
        self.run.procs.stop(self.workers, grace_s=5)
        self.run.procs.stop(list(self.tiers.values()), grace_s=10)
        await self.http.close()
        if self.conn is not None:
            self.conn.close()
        if self.db is not None:
            await self.db.close()
        if self.url:
            self.run.server.drop(self.url)


# -- measuring occurrences ---------------------------------------------------------------------------


@dataclass
class Occurrence:
    job_id: str
    tenant: str
    due: float
    dispatched: float | None
    leased: float | None
    state: str | None
    attempt: int | None


def occurrences(
    stack: Stack, name_like: str, lo: float | None = None, hi: float | None = None
) -> tuple[list[Occurrence], dict[str, int]]:
    """Every execution of the jobs named like name_like (each with its due time), and per job the
    number of its executions; lo/hi bound scheduled_for (epoch seconds) for cron jobs."""
    rows = stack.sql(
        "SELECT j.job_id::text, t.name, j.jitter_s, extract(epoch FROM e.scheduled_for), "
        "extract(epoch FROM e.dispatched_at), extract(epoch FROM a.leased_at), e.state, e.attempt "
        "FROM jobs AS j JOIN tenants AS t ON t.tenant_id = j.tenant_id "
        "LEFT JOIN executions AS e ON e.job_id = j.job_id "
        "  AND (%(lo)s::float8 IS NULL OR e.scheduled_for >= to_timestamp(%(lo)s::float8)) "
        "  AND (%(hi)s::float8 IS NULL OR e.scheduled_for < to_timestamp(%(hi)s::float8)) "
        "LEFT JOIN attempts AS a ON a.execution_id = e.execution_id AND a.attempt = 1 "
        "  AND a.scheduled_for = e.scheduled_for "  # one partition's index per row on partitioned history
        "WHERE j.name LIKE %(name)s",
        {"name": name_like, "lo": lo, "hi": hi},
    )
    occ, per_job = [], defaultdict(int)
    for job_id, tenant, jitter_s, sched, disp, leased, state, attempt in rows:
        per_job[job_id] += 0
        if sched is None:
            continue
        per_job[job_id] += 1
        due = float(sched) + (jitter_offset_s(job_id, jitter_s) if jitter_s else 0)
        occ.append(
            Occurrence(
                job_id,
                tenant,
                due,
                float(disp) if disp is not None else None,
                float(leased) if leased is not None else None,
                state,
                attempt,
            )
        )
    return occ, dict(per_job)


def correctness(occ: list[Occurrence], per_job: dict[str, int], expected_per_job: int | None = 1) -> dict[str, Any]:
    succeeded_jobs = {o.job_id for o in occ if o.state == "succeeded"}
    return {
        "jobs": len(per_job),
        "executions": len(occ),
        "duplicateExecutions": sum(
            n - expected_per_job for n in per_job.values() if expected_per_job is not None and n > expected_per_job
        ),
        "extraAttempts": sum((o.attempt or 1) - 1 for o in occ if (o.attempt or 0) > 1),
        "lostJobs": sum(1 for j in per_job if j not in succeeded_jobs),
        "notStarted": sum(1 for o in occ if o.leased is None),
        "notSucceeded": sum(1 for o in occ if o.state != "succeeded"),
        "states": {s: sum(1 for o in occ if o.state == s) for s in sorted({str(o.state) for o in occ})},
    }


def lag_figures(occ: list[Occurrence], t0: float | None = None) -> dict[str, Any]:
    started = [o for o in occ if o.leased is not None]
    lags = [o.leased - o.due for o in started]
    disp = [o.dispatched - o.due for o in occ if o.dispatched is not None]
    out: dict[str, Any] = {"startLagS": summary(lags), "dispatchLagS": summary(disp)}
    if t0 is not None and started:
        first = min(o.leased for o in started)
        last = max(o.leased for o in started)
        out["firstStartAfterTS"] = first - t0
        out["lastStartAfterTS"] = last - t0
        out["drainPerS"] = len(started) / (last - t0) if last > t0 else None
        buckets: dict[int, int] = defaultdict(int)
        for o in started:
            buckets[math.floor((o.leased - t0) * 2)] += 1
        out["startedPerHalfSecond"] = {f"{k / 2:.1f}": v for k, v in sorted(buckets.items())}
    return out


def by_tenant(occ: list[Occurrence], pick: Callable[[str], bool]) -> list[Occurrence]:
    return [o for o in occ if pick(o.tenant)]


# -- the run -----------------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    figure: str
    target: str
    measured: str
    ok: bool | None  # None: informational


class ScenarioFailed(Exception):
    pass


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.deadline = self.started + args.deadline
        self.tmp = Path(tempfile.mkdtemp(prefix="kairos-herd-"))
        (self.tmp / "logs").mkdir()
        self.procs = Processes(self.tmp / "logs")
        self.server: Server = None  # type: ignore[assignment]
        self.rows: list[Row] = []
        self.results: dict[str, Any] = {}
        self.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.out_path = Path(args.results_dir) / f"herd-{self.stamp}.json"
        self.failed = False
        self.loop_ms: dict[str, float] = {}  # python_loop_ms() at the start and at the end

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def row(self, scenario: str, figure: str, target: str, measured: str, ok: bool | None) -> None:
        self.rows.append(Row(scenario, figure, target, measured, ok))

    def meta(self) -> dict[str, Any]:
        def git(*a: str) -> str:
            try:
                return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                return ""

        a = self.args
        return {
            "startedAt": self.stamp,
            "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", "app", "sql")),
            "cpus": os.cpu_count(),
            "loadAverageAtStart": os.getloadavg(),
            "python": sys.version.split()[0],
            "pythonLoopMs": self.loop_ms,
            "command": " ".join(["loadtest/herd.py", *sys.argv[1:]]),
            "config": {k: v for k, v in vars(a).items() if k not in ("worker_child", "results_dir")},
        }

    def save(self) -> None:
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"meta": self.meta(), "scenarios": self.results, "table": [vars(r) for r in self.rows]}
        self.out_path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def python_loop_ms() -> float:
    """CPU milliseconds of a fixed pure-Python workload, best of five: how fast this machine runs Python
    right now. The same code measured half as fast on one day as on the day before (docs/performance.md,
    "Measuring on this machine"), so a run's figures are read beside this one."""
    best = math.inf
    for _ in range(5):
        t = time.process_time()
        x = 0
        for i in range(300_000):
            x += i * i % 7
        best = min(best, time.process_time() - t)
    return round(best * 1000, 1)


# -- correctness rows shared by the job scenarios ----------------------------------------------------


def correctness_rows(run: Run, name: str, c: dict[str, Any]) -> None:
    dup = c["duplicateExecutions"] + c["extraAttempts"]
    run.row(name, "duplicates (extra executions + extra attempts)", "0", f"{dup}", dup == 0)
    run.row(name, "lost (jobs with no succeeded execution)", "0", f"{c['lostJobs']}", c["lostJobs"] == 0)
    run.row(
        name,
        "every execution succeeded",
        "yes",
        f"{c['executions'] - c['notSucceeded']}/{c['executions']}",
        c["notSucceeded"] == 0,
    )
    if dup or c["lostJobs"] or c["notSucceeded"]:
        run.failed = True


# The benchmark's own poll: every POLL_S it asks whether any execution is still ready or leased, two
# probes of partial indexes (PENDING_SQL); the count of succeeded executions, a scan of the table
# (about 20-30 ms of PostgreSQL's CPU at 100,000 rows), runs only every COUNT_EVERY-th poll and when
# nothing is pending. Every figure comes from the rows' own timestamps, so the poll only decides when
# to stop waiting; counting every second took 2 % of PostgreSQL's time in herd100k's drain, at 0.5 s 8 %.
POLL_S = 1.0
COUNT_EVERY = 5
PENDING_SQL = (
    "SELECT EXISTS (SELECT 1 FROM executions WHERE state = 'ready') "
    "OR EXISTS (SELECT 1 FROM executions WHERE lease_until IS NOT NULL)"
)


class MaintenanceSampler:
    """Once a second, the database's autovacuum workers (and any other VACUUM or ANALYZE) and the table
    each works on: ``seconds`` maps "vacuum jobs" and the like to the seconds seen, so a drain that
    shared the machine with a vacuum of a large table says so beside its figures; four times a second,
    what the active statements wait on (``waits``)."""

    EVERY_S = 0.25
    MAINTENANCE = re.compile(r"^(?:autovacuum: )?(VACUUM ANALYZE|VACUUM|ANALYZE)\s+(\S+)", re.IGNORECASE)

    def __init__(self, url: str) -> None:
        self.url = url
        self.seconds: dict[str, int] = {}
        self.waits: dict[str, int] = {}  # what the active statements waited on ("running": on CPU), per sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maintenance-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with psycopg.connect(libpq(self.url), autocommit=True) as conn:
            tick = 0
            while not self._stop.wait(self.EVERY_S):
                tick += 1
                rows = conn.execute(
                    "SELECT backend_type, query, coalesce(wait_event_type || ':' || wait_event, 'running') "
                    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND (backend_type = 'autovacuum worker' OR (backend_type = 'client backend' AND state = 'active'))"
                ).fetchall()
                for kind, query, event in rows:
                    if kind == "client backend":
                        self.waits[event] = self.waits.get(event, 0) + 1
                    found = self.MAINTENANCE.search(query or "")
                    if found and tick % round(1 / self.EVERY_S) == 0:
                        what = f"{found.group(1).lower()} {found.group(2).removeprefix('public.')}"
                        self.seconds[what] = self.seconds.get(what, 0) + 1


async def wait_drain(
    run: Run,
    stack: Stack,
    expected: int,
    until: float,
    *,
    t0: float | None,
    stall_s: float = 30.0,
    since: float | None = None,
) -> dict[str, Any]:
    """Poll (every POLL_S, counting when PENDING_SQL allows) until `expected` executions succeeded or the
    wall-clock bound `until` (epoch seconds) passes, or nothing progressed for stall_s after the last
    due time. Takes the planner statistics (and EXPLAIN with --explain) once half of them succeeded.
    ``since`` (epoch seconds): count only executions finished from then on, a range of executions_finished,
    so a database that holds history (the lived one) is not drained before the herd starts."""
    count_sql = "SELECT count(*) FROM executions WHERE state = 'succeeded'"
    if since is not None:
        count_sql += f" AND finished_at >= to_timestamp({since:.3f})"
    info: dict[str, Any] = {}
    mid_done = False
    last_n, last_change = -1, time.time()
    for i in range(1_000_000):
        stack.check_alive()
        if i % COUNT_EVERY and last_n >= 0 and stack.sql1(PENDING_SQL):
            await asyncio.sleep(POLL_S)
            continue
        n = stack.sql1(count_sql)
        now = time.time()
        if n != last_n:
            last_n, last_change = n, now
        if not mid_done and n >= expected / 2 and (t0 is None or now >= t0):
            mid_done = True
            info["midpoint"] = {"succeeded": n, "atS": None if t0 is None else now - t0, "tables": stack.table_stats()}
            if run.args.explain:
                plan = stack.explain_lease()
                info["midpoint"]["explainLease"] = plan
                print(f"  [{stack.label}] lease statement at the drain midpoint ({n} succeeded):")
                print("    " + plan.replace("\n", "\n    "))
        if n >= expected:
            info["complete"] = True
            break
        if now > until or time.monotonic() > run.deadline:
            info["complete"] = False
            info["timedOut"] = True
            break
        if t0 is not None and now > t0 and now - last_change > stall_s:
            info["complete"] = False
            info["stalled"] = True
            break
        await asyncio.sleep(POLL_S)
    info["succeeded"] = last_n
    info["tablesAtEnd"] = stack.table_stats()
    return info


def drain_timeout(run: Run, jobs: int) -> float:
    return run.args.drain_timeout if run.args.drain_timeout is not None else 30 + jobs / 500


# -- herd scenarios ----------------------------------------------------------------------------------

BodyOf = Callable[[str, str, dict[str, Any]], bytes]  # (job name, tenant, schedule) -> a job's JSON


def queue_body(name: str, _tenant: str, schedule: dict[str, Any]) -> bytes:
    return job_body(name, schedule)


async def herd(
    run: Run,
    name: str,
    groups: list[tuple[str, int]],
    command: list[str] | None = None,
    *,
    body_of: BodyOf = queue_body,
    stack: Stack | None = None,
) -> dict[str, Any]:
    """All jobs of groups [(tenant, jobs)] due at one instant T, submitted (interleaved) before T;
    body_of writes each tenant's job (default: the shared worker pool), stack is the scenario's own."""
    args = run.args
    total = sum(n for _, n in groups)
    stack = stack or Stack(run, name, command)
    try:
        await stack.up([g for g, _ in groups])
        keys = [(stack.tenants[g].key, g) for g, n in groups for _ in range(n)]
        random.Random(args.seed).shuffle(keys)
        # Calibrate the submit rate with jobs due tomorrow, then pick T so the submits land before it.
        cal_key = keys[0][0]
        cal_body = body_of("calibrate", keys[0][1], {"runAt": iso(datetime.now(timezone.utc) + timedelta(days=1))})
        cal = await submit(
            stack.http,
            lambda i: (cal_key, cal_body),
            count=min(1000, max(50, total // 20)),
            concurrency=args.submit_concurrency,
            stop_at=time.monotonic() + 3,
        )
        rate = max(20.0, cal.ok_items / cal.seconds if cal.seconds else 20.0)
        lead = max(args.lead_min, total / (0.7 * rate) + args.lead_min)
        need = lead + drain_timeout(run, total) + 30
        if need > run.left():
            raise ScenarioFailed(f"needs about {need:.0f} s (submits at {rate:.0f}/s), {run.left():.0f} s left")
        t_due = math.ceil(time.time() + lead)
        schedule = {"runAt": iso(datetime.fromtimestamp(t_due, timezone.utc))}
        bodies = {g: body_of("herd", g, schedule) for g, _ in groups}
        print(
            f"  [{name}] {total} jobs over {len(groups)} tenant(s); calibrated submits {rate:.0f}/s; "
            f"T in {t_due - time.time():.1f} s"
        )
        sub = await submit(
            stack.http, lambda i: (keys[i][0], bodies[keys[i][1]]), count=total, concurrency=args.submit_concurrency
        )
        submitted_at = time.time()
        accepted = stack.sql1("SELECT count(*) FROM jobs WHERE name = 'herd'")
        print(
            f"  [{name}] submitted {sub.ok_items}/{total} in {sub.seconds:.1f} s ({sub.ok_items / sub.seconds:,.0f}/s)"
            f"; {t_due - submitted_at:.1f} s before T"
        )
        late = stack.sql1("SELECT count(*) FROM jobs WHERE name = 'herd' AND created_at >= run_at")
        await asyncio.sleep(max(0.0, t_due - 1 - time.time()))
        cpu0, counters0 = stack.cpu(), stack.db_counters()
        maintenance = MaintenanceSampler(stack.url)
        maintenance.start()
        try:
            drain = await wait_drain(run, stack, accepted, t_due + drain_timeout(run, total), t0=t_due, since=t_due - 1)
        finally:
            maintenance.stop()
        cpu1, counters1 = stack.cpu(), stack.db_counters()
        occ, per_job = occurrences(stack, "herd")
        c = correctness(occ, per_job)
        res = {
            "jobs": total,
            "accepted": accepted,
            "tenants": len(groups),
            "T": t_due,
            "submit": sub.as_json(),
            "submitCalibrationPerS": rate,
            "submitsEndedBeforeTS": t_due - submitted_at,
            "lateSubmits": late,
            "drain": drain,
            "correctness": c,
            **lag_figures(occ, t_due),
            "perTenantGroup": {},
            "cpuSecondsDuringDrain": {k: round(cpu1[k] - cpu0.get(k, 0), 2) for k in cpu1},
            "drainWallS": time.time() - (t_due - 1),
            "database": {k: counters1[k] - counters0[k] for k in counters1},
            "maintenanceDuringDrainS": maintenance.seconds,
            "waitEventsDuringDrain": maintenance.waits,
            "apiProcesses": stack.api_processes,
        }
        return res | {"_occ": occ}
    finally:
        await stack.down()


def herd_rows(
    run: Run, name: str, res: dict[str, Any], *, max_lag_target: float | None, drain_target: float | None
) -> None:
    lag = res["startLagS"]
    if res["lateSubmits"]:
        run.row(name, "all submits landed before T", "yes", f"{res['lateSubmits']} late", False)
    run.row(name, "first start after T", "-", fmt_s(res.get("firstStartAfterTS")), None)
    run.row(name, "start lag p50", "-", fmt_s(lag["p50"]), None)
    run.row(name, "start lag p99", "-", fmt_s(lag["p99"]), None)
    not_started = res["correctness"]["notStarted"] + (res["accepted"] - res["correctness"]["jobs"])
    measured = fmt_s(lag["max"]) + (f" ({not_started} never started)" if not_started else "")
    if max_lag_target is not None:
        run.row(
            name,
            "every occurrence started within (max start lag)",
            f"<= {max_lag_target:g} s",
            measured,
            lag["max"] is not None and lag["max"] <= max_lag_target and not not_started,
        )
    else:
        run.row(name, "start lag max", "-", measured, None)
    run.row(
        name,
        "drain (started/s, T to last start)",
        f">= {drain_target:,.0f}/s" if drain_target else "-",
        fmt_rate(res.get("drainPerS")),
        None if drain_target is None else (res.get("drainPerS") or 0) >= drain_target,
    )
    run.row(name, "dispatch lag p99", "-", fmt_s(res["dispatchLagS"]["p99"]), None)
    run.row(name, "submit rate (side figure)", "-", fmt_rate(res["submit"]["itemsPerS"]), None)
    started = res["correctness"]["jobs"] - res["correctness"]["notStarted"]
    if started:
        cpu = res["cpuSecondsDuringDrain"]
        tiers = ("api", "scheduler", "executor", "workers", "postgres")
        per = {k: 1e6 * cpu.get(k, 0.0) / started for k in tiers}
        total = sum(per.values())
        targeted = name in ("herd10k", "herd31k", "herd100k")
        run.row(
            name,
            "CPU per started execution, us: " + " / ".join(tiers) + " = all",
            "<= 60 us" if targeted else "-",
            " / ".join(f"{per[k]:.0f}" for k in tiers) + f" = {total:.0f}",
            total <= 60 if targeted else None,
        )
    busy = res.get("maintenanceDuringDrainS") or {}
    if busy:
        seen = ", ".join(f"{what} {s} s" for what, s in sorted(busy.items(), key=lambda kv: -kv[1]))
        run.row(name, "vacuum and analyze seen during the drain (sampled each second)", "-", seen, None)
    waits = res.get("waitEventsDuringDrain") or {}
    if waits:
        top = ", ".join(f"{what} {n}" for what, n in sorted(waits.items(), key=lambda kv: -kv[1])[:4])
        run.row(name, "active statements' wait events during the drain (samples)", "-", top, None)
    correctness_rows(run, name, res["correctness"])


async def hog_and_small(
    run: Run,
    name: str,
    hog: int,
    small_tenants: int,
    small_jobs: int,
    *,
    max_lag_target: float | None,
    drain_target: float | None,
    small_p99_target: float,
    ratio_target: float,
) -> None:
    """Tenant ``hog``'s herd with ``small_tenants`` small ones due at the same T: the herd's rows, the small
    tenants' p99 against its target, the hog's, and pgqueuer's arm beside it."""
    groups = [("hog", hog)] + [(f"small-{i:03d}", small_jobs) for i in range(1, small_tenants + 1)]
    res = await herd(run, name, groups)
    occ = res.pop("_occ")
    small = by_tenant(occ, lambda t: t.startswith("small-"))
    res["perTenantGroup"] = {"hog": lag_figures(by_tenant(occ, lambda t: t == "hog")), "small": lag_figures(small)}
    run.results[name] = res
    herd_rows(run, name, res, max_lag_target=max_lag_target, drain_target=drain_target)
    p99 = res["perTenantGroup"]["small"]["startLagS"]["p99"]
    run.row(
        name,
        "small tenants' start lag p99",
        f"<= {small_p99_target:g} s",
        fmt_s(p99),
        p99 is not None and p99 <= small_p99_target,
    )
    run.row(name, "hog's start lag p99", "-", fmt_s(res["perTenantGroup"]["hog"]["startLagS"]["p99"]), None)
    await reference_arm(run, name, groups, res, ratio_target=ratio_target, small="small-")


async def scenario_herd100k(run: Run) -> None:
    a = run.args
    await hog_and_small(
        run,
        "herd100k",
        a.hog,
        a.small_tenants,
        a.small_jobs,
        max_lag_target=7.0,
        drain_target=15_000,
        small_p99_target=2.0,
        ratio_target=2.0,
    )


async def scenario_herd31k(run: Run) -> None:
    a = run.args
    await hog_and_small(
        run,
        "herd31k",
        a.herd31k_hog,
        a.herd31k_small,
        100,
        max_lag_target=None,
        drain_target=None,
        small_p99_target=1.0,
        ratio_target=1.0,
    )


async def reference_arm(
    run: Run,
    name: str,
    groups: list[tuple[str, int]],
    res: dict[str, Any],
    *,
    ratio_target: float,
    small: str | None = None,
) -> None:
    """The same herd through pgqueuer (``loadtest/reference.py``), its figures and the drain ratio as rows."""
    if run.args.reference == "none":
        return
    ref = await reference.pgqueuer_herd(run, name, groups)
    res["reference"] = {"pgqueuer": ref}
    reference.rows(run, name, res, ref, ratio_target=ratio_target, small=small)


async def scenario_herd10k(run: Run) -> None:
    a = run.args
    n_t = max(1, a.herd10k_tenants)
    groups = [(f"tenant-{i + 1}", a.herd10k_jobs // n_t + (1 if i < a.herd10k_jobs % n_t else 0)) for i in range(n_t)]
    res = await herd(run, "herd10k", groups)
    res.pop("_occ")
    run.results["herd10k"] = res
    herd_rows(run, "herd10k", res, max_lag_target=2.0, drain_target=None)
    await reference_arm(run, "herd10k", groups, res, ratio_target=1.0)


async def scenario_mixed(run: Run) -> None:
    a = run.args
    res = await herd(run, "mixed", [("A", a.mixed_a), ("B", a.mixed_b)])
    occ = res.pop("_occ")
    res["perTenantGroup"] = {
        "A": lag_figures(by_tenant(occ, lambda t: t == "A")),
        "B": lag_figures(by_tenant(occ, lambda t: t == "B")),
    }
    run.results["mixed"] = res
    herd_rows(run, "mixed", res, max_lag_target=None, drain_target=None)
    run.row("mixed", "A's start lag p99", "-", fmt_s(res["perTenantGroup"]["A"]["startLagS"]["p99"]), None)
    run.row("mixed", "B's start lag p99", "-", fmt_s(res["perTenantGroup"]["B"]["startLagS"]["p99"]), None)


# -- light, steady, short ----------------------------------------------------------------------------


async def scenario_light(run: Run) -> None:
    a = run.args
    stack = Stack(run, "light")
    try:
        await stack.up(["light"])
        key = stack.tenants["light"].key
        t1 = math.ceil(time.time() + a.lead_min + (a.light_burst + a.light_spaced) / 50)
        t2 = t1 + 2.0
        bodies = [job_body("light-burst", {"runAt": iso(datetime.fromtimestamp(t1, timezone.utc))})] * a.light_burst
        bodies += [
            job_body(
                "light-spaced", {"runAt": iso(datetime.fromtimestamp(t2 + i * a.light_gap_ms / 1000, timezone.utc))}
            )
            for i in range(a.light_spaced)
        ]
        sub = await submit(stack.http, lambda i: (key, bodies[i]), count=len(bodies), concurrency=4)
        last_due = t2 + max(0, a.light_spaced - 1) * a.light_gap_ms / 1000
        accepted = stack.sql1("SELECT count(*) FROM jobs WHERE name LIKE 'light-%'")
        await asyncio.sleep(max(0.0, t1 - 1 - time.time()))
        drain = await wait_drain(run, stack, accepted, last_due + drain_timeout(run, len(bodies)), t0=None)
        occ, per_job = occurrences(stack, "light-%")
        burst = [o for o in occ if abs(o.due - t1) < 1e-3]
        spaced = [o for o in occ if abs(o.due - t1) >= 1e-3]
        c = correctness(occ, per_job)
        res = {
            "T1": t1,
            "T2": t2,
            "submit": sub.as_json(),
            "accepted": accepted,
            "drain": drain,
            "correctness": c,
            "all": lag_figures(occ),
            "burst": lag_figures(burst, t1),
            "spaced": lag_figures(spaced),
        }
        run.results["light"] = res
        p99 = res["all"]["startLagS"]["p99"]
        missing = accepted - c["jobs"] + c["notStarted"]
        run.row(
            "light",
            "start lag p99 (burst + one by one)",
            "<= 300 ms",
            fmt_s(p99) + (f" ({missing} never started)" if missing else ""),
            p99 is not None and p99 <= 0.3 and not missing,
        )
        run.row(
            "light",
            f"burst of {len(burst)}: p99 / max",
            "-",
            f"{fmt_s(res['burst']['startLagS']['p99'])} / {fmt_s(res['burst']['startLagS']['max'])}",
            None,
        )
        run.row(
            "light",
            f"{len(spaced)} one by one: p50 / p99",
            "-",
            f"{fmt_s(res['spaced']['startLagS']['p50'])} / {fmt_s(res['spaced']['startLagS']['p99'])}",
            None,
        )
        correctness_rows(run, "light", c)
    finally:
        await stack.down()


async def scenario_steady(run: Run) -> None:
    """rate*60 cron jobs `* * * * *` with a 60 s jitter window: each job has its own second of the
    minute, so about `rate` occurrences fall due every second. Measured: the occurrences due in
    [M, M + seconds), M the first minute boundary after the submits (every job fires once a minute)."""
    a = run.args
    n = a.steady_rate * 60
    need = n / 150 + 60 + a.steady_seconds + 60
    if need > run.left():
        raise ScenarioFailed(f"needs up to {need:.0f} s, {run.left():.0f} s left")
    stack = Stack(run, "steady")
    try:
        await stack.up(["steady"])
        key = stack.tenants["steady"].key
        body = job_body("steady", {"cron": "* * * * *", "tz": "UTC", "jitterSeconds": 60})
        print(f"  [steady] submitting {n} cron jobs")
        sub = await submit(stack.http, lambda i: (key, body), count=n, concurrency=a.submit_concurrency)
        m = (math.floor(time.time() / 60) + 1) * 60
        if m - time.time() < 3:
            m += 60
        end = m + a.steady_seconds
        print(
            f"  [steady] {sub.ok_items} jobs in {sub.seconds:.1f} s; measuring from {m - time.time():.0f} s "
            f"from now for {a.steady_seconds} s"
        )
        await asyncio.sleep(max(0.0, m - 1 - time.time()))
        cpu0 = stack.cpu()
        await asyncio.sleep(max(0.0, end - time.time()))
        # Let the last due occurrences start and finish (bounded).
        slack_end = time.time() + 30
        occ: list[Occurrence] = []
        expected: dict[tuple[str, float], None] = {}
        for _ in range(1000):
            occ, _ = occurrences(stack, "steady", lo=m - 60, hi=end)
            occ = [o for o in occ if m <= o.due < end]
            if len(occ) >= sub.ok_items * a.steady_seconds / 60 * 0.999 and all(o.state == "succeeded" for o in occ):
                break
            if time.time() > slack_end:
                break
            await asyncio.sleep(1.0)
        cpu1 = stack.cpu()
        jobs = stack.sql("SELECT job_id::text, jitter_s FROM jobs WHERE name = 'steady'")
        for job_id, jitter_s in jobs:
            off = jitter_offset_s(job_id, jitter_s)
            for k in range(a.steady_seconds // 60 + 2):
                due = m - 60 + k * 60 + off
                if m <= due < end:
                    expected[(job_id, due)] = None
        got = {(o.job_id, round(o.due, 3)): o for o in occ}
        ok = {k for k, o in got.items() if o.state == "succeeded"}
        lost = sum(1 for (j, d) in expected if (j, round(d, 3)) not in ok)
        extra_attempts = sum((o.attempt or 1) - 1 for o in occ if (o.attempt or 0) > 1)
        c = {
            "jobs": len(jobs),
            "expectedOccurrences": len(expected),
            "executions": len(occ),
            "duplicateExecutions": 0,  # UNIQUE (job_id, scheduled_for): an occurrence has at most one
            "extraAttempts": extra_attempts,
            "lostJobs": lost,
            "notStarted": sum(1 for o in occ if o.leased is None),
            "notSucceeded": sum(1 for o in occ if o.state != "succeeded"),
        }
        res = {
            "jobs": n,
            "submit": sub.as_json(),
            "windowStart": m,
            "windowSeconds": a.steady_seconds,
            "occurrencesPerS": len(expected) / a.steady_seconds,
            "correctness": c,
            **lag_figures(occ),
            "cpuSecondsDuringWindow": {k: round(cpu1[k] - cpu0.get(k, 0), 2) for k in cpu1},
        }
        run.results["steady"] = res
        p99 = res["startLagS"]["p99"]
        run.row(
            "steady",
            f"start lag p99 at {res['occurrencesPerS']:,.0f} occurrences/s for {a.steady_seconds} s",
            "<= 1 s",
            fmt_s(p99),
            p99 is not None and p99 <= 1.0 and not c["notStarted"],
        )
        run.row("steady", "start lag max", "-", fmt_s(res["startLagS"]["max"]), None)
        run.row("steady", "dispatch lag p99", "-", fmt_s(res["dispatchLagS"]["p99"]), None)
        run.row("steady", "duplicates (extra attempts)", "0", str(extra_attempts), extra_attempts == 0)
        run.row(
            "steady",
            "lost (due occurrences without a succeeded execution)",
            "0",
            f"{lost} of {len(expected)}",
            lost == 0,
        )
        if extra_attempts or lost:
            run.failed = True
    finally:
        await stack.down()


async def scenario_short(run: Run) -> None:
    a = run.args
    if a.short_seconds + 5 + drain_timeout(run, 0) + 30 > run.left():
        raise ScenarioFailed(f"not enough time left ({run.left():.0f} s)")
    stack = Stack(run, "short")
    try:
        await stack.up(["short"])
        key = stack.tenants["short"].key
        rnd = random.Random(a.seed)
        count = int(a.short_rate * a.short_seconds)
        bodies = [job_body("short", {"delaySeconds": round(rnd.uniform(1, 5), 3)}) for _ in range(count)]
        cpu0 = stack.cpu()
        sub = await submit(
            stack.http, lambda i: (key, bodies[i]), count=count, concurrency=a.submit_concurrency, rate=a.short_rate
        )
        accepted = stack.sql1("SELECT count(*) FROM jobs WHERE name = 'short'")
        drain = await wait_drain(run, stack, accepted, time.time() + 5 + drain_timeout(run, 0), t0=None)
        cpu1 = stack.cpu()
        occ, per_job = occurrences(stack, "short")
        c = correctness(occ, per_job)
        res = {
            "submit": sub.as_json(),
            "accepted": accepted,
            "drain": drain,
            "correctness": c,
            **lag_figures(occ),
            "cpuSeconds": {k: round(cpu1[k] - cpu0.get(k, 0), 2) for k in cpu1},
        }
        run.results["short"] = res
        p99 = res["startLagS"]["p99"]
        missing = accepted - c["jobs"] + c["notStarted"]
        run.row(
            "short",
            f"start lag p99, delaySeconds 1-5 at {sub.ok_items / sub.seconds:,.0f} submits/s",
            "<= 1 s",
            fmt_s(p99) + (f" ({missing} never started)" if missing else ""),
            p99 is not None and p99 <= 1.0 and not missing,
        )
        run.row("short", "start lag max", "-", fmt_s(res["startLagS"]["max"]), None)
        correctness_rows(run, "short", c)
    finally:
        await stack.down()


# -- submit ------------------------------------------------------------------------------------------


async def scenario_submit(run: Run) -> None:
    a = run.args
    stack = Stack(run, "submit")
    try:
        names = [f"submit-{i}" for i in range(8)]
        await stack.up(names)
        keys = [stack.tenants[n].key for n in names]
        far = iso(datetime.now(timezone.utc) + timedelta(days=1))
        bodies = [job_body("submit", {"runAt": far}, ref="work") for _ in keys]
        res: dict[str, Any] = {"apiProcesses": stack.api_processes, "client": a.client, "phases": {}}
        # What the load generator itself costs per request, with each client kind.
        cost = {}
        for kind in ("raw", "httpx"):
            http = Http(kind, "127.0.0.1", stack.api_port)
            try:
                s = await submit(
                    http,
                    lambda i: (keys[0], b""),
                    count=2000,
                    concurrency=16,
                    method="GET",
                    path="/healthz",
                    ok_status=(200,),
                )
            finally:
                await http.close()
            cost[kind] = {"cpuUsPerRequest": 1e6 * s.cpu_s / max(1, s.requests), "requestsPerS": s.requests / s.seconds}
        res["generatorCostHealthz"] = cost
        rates = {}
        for clients in (int(x) for x in a.submit_clients.split(",") if x):
            c0, cpu0 = stack.db_counters(), stack.cpu()
            s = await submit(
                stack.http,
                lambda i: (keys[i % len(keys)], bodies[i % len(keys)]),
                count=None,
                concurrency=clients,
                stop_at=time.monotonic() + a.submit_seconds,
            )
            c1, cpu1 = stack.db_counters(), stack.cpu()
            res["phases"][f"single-{clients}"] = s.as_json() | {
                "database": {k: c1[k] - c0[k] for k in c1},
                # Per accepted request, each tier's CPU (us): where the machine's two cores went.
                "cpuUsPerRequest": {k: round(1e6 * (cpu1[k] - cpu0.get(k, 0)) / max(1, s.ok_requests)) for k in cpu1},
            }
            rates[clients] = s.ok_items / s.seconds
            lat = s.latencies
            run.row(
                "submit",
                f"POST /v1/jobs, {clients} clients ({stack.api_processes} API process"
                f"{'es' if stack.api_processes > 1 else ''})",
                ">= 3,000/s" if clients == 64 else "-",
                fmt_rate(rates[clients])
                + (f" ({s.requests - s.ok_requests} failed)" if s.requests - s.ok_requests else ""),
                rates[clients] >= 3000 if clients == 64 else None,
            )
            run.row(
                "submit",
                f"POST /v1/jobs latency p50 / p99, {clients} clients",
                "p99 <= 100 ms" if clients == 64 else "-",
                f"{fmt_s(pct(lat, 50))} / {fmt_s(pct(lat, 99))}",
                (pct(lat, 99) or 1e9) <= 0.1 if clients == 64 else None,
            )
        if 4 in rates and 64 in rates:
            run.row(
                "submit",
                "throughput at 64 clients vs at 4",
                ">= 1.0x",
                f"{rates[64] / rates[4]:.2f}x",
                rates[64] >= rates[4],
            )
        # POST /v1/jobs:batch (may not exist yet).
        items = [b'{"jobs":[' + b",".join([bodies[k]] * a.batch_size) + b"]}" for k in range(len(keys))]
        probe = await submit(
            stack.http,
            lambda i: (keys[0], items[0]),
            count=1,
            concurrency=1,
            path="/v1/jobs:batch",
            ok_status=(200,),
            items_of=lambda st, d: d.count(b'"jobId"'),
        )
        if probe.ok_requests == 0:
            status = next(iter(probe.statuses), "?")
            res["batch"] = {
                "available": False,
                "probeStatus": status,
                "probeBody": probe.first_body[:300].decode(errors="replace"),
            }
            run.row(
                "submit",
                f"POST /v1/jobs:batch ({a.batch_size}/call), {a.batch_clients} clients",
                ">= 25,000/s",
                f"not available (HTTP {status})",
                False,
            )
        else:
            cpu0 = stack.cpu()
            s = await submit(
                stack.http,
                lambda i: (keys[i % len(keys)], items[i % len(keys)]),
                count=None,
                concurrency=a.batch_clients,
                path="/v1/jobs:batch",
                ok_status=(200,),
                items_of=lambda st, d: d.count(b'"jobId"'),
                stop_at=time.monotonic() + a.submit_seconds,
            )
            rate = s.ok_items / s.seconds
            cpu1 = stack.cpu()
            res["batch"] = {
                "available": True,
                **s.as_json(),
                "probe": probe.as_json(),
                "cpuUsPerItem": {k: round(1e6 * (cpu1[k] - cpu0.get(k, 0)) / max(1, s.ok_items), 1) for k in cpu1},
            }
            run.row(
                "submit",
                f"POST /v1/jobs:batch ({a.batch_size}/call), {a.batch_clients} clients",
                ">= 25,000/s",
                f"{fmt_rate(rate)} (call p99 {fmt_s(pct(s.latencies, 99))})",
                rate >= 25_000,
            )
        run.row(
            "submit",
            "generator CPU per request, raw / httpx (GET /healthz)",
            "-",
            f"{cost['raw']['cpuUsPerRequest']:.0f} / {cost['httpx']['cpuUsPerRequest']:.0f} us",
            None,
        )
        run.results["submit"] = res
    finally:
        await stack.down()


async def spawn_rate(argv: list[str], count: int, concurrency: int, *, pipes: bool = False) -> float:
    """Processes per second that asyncio starts and reaps, ``concurrency`` in flight, from this process;
    with ``pipes``, each also gets a payload on stdin and its stdout and stderr read (as a command worker does)."""
    slots = asyncio.Semaphore(concurrency)
    io = asyncio.subprocess.PIPE if pipes else asyncio.subprocess.DEVNULL

    async def one() -> None:
        async with slots:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=io, stdout=io, stderr=io)
            if pipes:
                await proc.communicate(b"{}")
            else:
                await proc.wait()

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(count)))
    return count / (time.monotonic() - t0)


async def scenario_command(run: Run) -> None:
    """`kairos worker -- true` (a process per execution) against asyncio spawning `true` on the same machine.

    This machine's spawn rate moves by a sixth between one second and the next, and by half between
    minutes (docs/performance.md, "Measuring on this machine"), so one baseline against one herd a minute later
    measured the machine as much as Kairos. Each round runs its herd between two baselines (before the
    stack starts, after it stops) and compares it with their mean; the figure is the median round."""
    a = run.args
    rounds: list[dict[str, Any]] = []
    for _ in range(max(1, a.command_rounds)):
        before = await spawn_rate(["true"], a.command_jobs, a.command_concurrency)
        with_pipes = await spawn_rate(["true"], a.command_jobs, a.command_concurrency, pipes=True)
        res = await herd(run, "command", [("cmd", a.command_jobs)], command=["true"])
        after = await spawn_rate(["true"], a.command_jobs, a.command_concurrency)
        res.pop("_occ")
        res["asyncioSpawnPerS"] = (before + after) / 2
        res["asyncioSpawnBeforeAfterPerS"] = [before, after]
        res["asyncioSpawnWithPipesPerS"] = with_pipes
        res["vsAsyncio"] = (res.get("drainPerS") or 0.0) / res["asyncioSpawnPerS"]
        rounds.append(res)
    median = sorted(rounds, key=lambda r: r["vsAsyncio"])[len(rounds) // 2]
    run.results["command"] = {**median, "rounds": rounds}
    herd_rows(run, "command", median, max_lag_target=None, drain_target=None)
    workers = f"{a.command_workers} x concurrency {a.command_concurrency}"
    for i, r in enumerate(rounds, start=1):
        b0, b1 = r["asyncioSpawnBeforeAfterPerS"]
        run.row(
            "command",
            f"round {i}: kairos worker drain / asyncio spawns of true, {a.command_concurrency} in "
            f"flight (one process) before and after",
            "-",
            f"{fmt_rate(r.get('drainPerS'))} / {fmt_rate(b0)}, {fmt_rate(b1)} = {100 * r['vsAsyncio']:.0f} %",
            None,
        )
    run.row(
        "command",
        "the same with stdin, stdout and stderr piped (what a command worker does), median round",
        "-",
        fmt_rate(median["asyncioSpawnWithPipesPerS"]),
        None,
    )
    drain = median.get("drainPerS") or 0.0
    run.row(
        "command",
        f"kairos worker -- true ({workers}) vs asyncio spawns, median of {len(rounds)} rounds",
        ">= 80 %",
        f"{100 * median['vsAsyncio']:.0f} % ({100 * drain / median['asyncioSpawnWithPipesPerS']:.0f} % of piped)",
        median["vsAsyncio"] >= 0.8,
    )


async def scenario_memory(run: Run) -> None:
    """Bytes per scheduler heap entry with 1,000,000 upcoming entries (loadtest/heap_memory.py: a component
    probe in its own process, no tiers: the heap is the scheduler's only per-entry state)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "loadtest" / "heap_memory.py"),
        "--entries",
        "1000000",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    found = re.search(r"bytes per heap entry\s+([\d,]+) B", out.decode())
    per_entry = int(found.group(1).replace(",", "")) if found else None
    run.results["memory"] = {"entries": 1_000_000, "bytesPerEntry": per_entry}
    run.row(
        "memory",
        "scheduler heap: bytes per entry, 1,000,000 loaded (component probe)",
        "<= 150 B",
        "-" if per_entry is None else f"{per_entry:,} B",
        per_entry is not None and per_entry <= 150,
    )


SCENARIOS = {
    "herd100k": scenario_herd100k,
    "herd10k": scenario_herd10k,
    "herd31k": scenario_herd31k,
    "mixed": scenario_mixed,
    "light": scenario_light,
    "steady": scenario_steady,
    "short": scenario_short,
    "submit": scenario_submit,
    "command": scenario_command,
    "memory": scenario_memory,
    **http_herd.SCENARIOS,
    **lived_bench.SCENARIOS,
}


# -- output ------------------------------------------------------------------------------------------


def print_table(rows: list[Row]) -> None:
    verdict = {True: "pass", False: "FAIL", None: "info"}
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max((len(r.figure) for r in rows), default=10)
        for r in rows:
            print(f"{r.scenario:9} {r.figure:{width}}  {r.target:>14}  {r.measured:>28}  {verdict[r.ok]}")
        return
    table = Table(title="Kairos herd benchmark")
    for col, justify in (
        ("scenario", "left"),
        ("figure", "left"),
        ("target", "right"),
        ("measured", "right"),
        ("", "center"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    style = {True: "green", False: "bold red", None: "dim"}
    for r in rows:
        table.add_row(r.scenario, r.figure, r.target, r.measured, f"[{style[r.ok]}]{verdict[r.ok]}[/]")
    Console(width=max(120, shutil.get_terminal_size((120, 40)).columns)).print(table)


async def main(run: Run) -> None:
    a = run.args
    run.server = Server(a, run.tmp)
    run.loop_ms["start"] = python_loop_ms()
    print(
        f"herd benchmark: scenarios {a.scenarios}; {a.workers} worker process(es) x concurrency "
        f"{a.worker_concurrency}, lease batch {a.lease_batch}; client {a.client}; cpus {os.cpu_count()}; "
        f"machine: fixed Python loop {run.loop_ms['start']} ms; logs in {run.tmp / 'logs'}"
    )
    for name in [s for s in a.scenarios.split(",") if s]:
        if run.left() < 30:
            run.results[name] = {"skipped": "global deadline"}
            run.row(name, "scenario", "runs", "skipped: global deadline", False)
            run.failed = True
            continue
        print(f"== {name}")
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(SCENARIOS[name](run), timeout=max(30.0, run.left()))
        except (ScenarioFailed, RuntimeError, TimeoutError, OSError, psycopg.Error) as exc:
            run.failed = True
            run.results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            run.row(name, "scenario", "runs", f"error: {str(exc).splitlines()[0][:60]}", False)
            print(f"  [{name}] failed: {exc}", file=sys.stderr)
        run.results.setdefault(name, {})["wallSeconds"] = round(time.monotonic() - t0, 1)
        run.save()
        print(f"  [{name}] done in {time.monotonic() - t0:.0f} s")
    run.loop_ms["end"] = python_loop_ms()
    run.row(
        "machine",
        "fixed Python loop, CPU ms at start / end (lower is faster)",
        "-",
        f"{run.loop_ms['start']} / {run.loop_ms['end']}",
        None,
    )
    settings = run.server.settings()
    if settings:
        run.row("machine", "PostgreSQL server", "-", ", ".join(f"{k} {v}" for k, v in settings.items()), None)
    run.save()


def entry() -> int:
    args = parse()
    if args.worker_child:
        run_worker_child(args.worker_child)
        return 0
    run = Run(args)

    def on_term(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    interrupted = False
    try:
        asyncio.run(main(run))
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping everything", file=sys.stderr)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        run.procs.stop(grace_s=5)
        if run.server is not None:
            if not args.keep:
                for name in run.server.created:
                    try:
                        with run.server.admin() as conn:
                            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                    except psycopg.Error:
                        pass
            run.server.close()
        if run.rows or run.results:
            run.save()
        if args.keep or run.failed:
            print(f"kept the logs: {run.tmp / 'logs'}")
        else:
            shutil.rmtree(run.tmp, ignore_errors=True)
    print_table(run.rows)
    print(f"results: {run.out_path}")
    if interrupted:
        return 130
    missed = any(r.ok is False for r in run.rows)
    return 1 if run.failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(entry())
