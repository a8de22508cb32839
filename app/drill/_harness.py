"""What every drill stands on (app/drill/scenarios.py has the drills): the options, ``Harness``
(everything one drill started, and its clean-up), ``run_drill`` (one drill within --timeout), a
single-region ``Site``, polling, reads of who owns the shards, and the replication state at a
failover's fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from uuid import UUID

from app import errors
from app.drill.cluster import PG_BIN_DEFAULT, Cluster, Node, WalTail, multi_host_url
from app.drill.fleet import Fleet, Proc, RegionEnv
from app.drill.measure import Report
from app.drill.reads import LiveShards, StandbyState, drill
from app.store import Database, Store, migrate, sealing
from app.store.db import create_engine

T = TypeVar("T")

PRIMARY, STANDBY = "eu-west", "us-east"
POOL = "drill"
DATABASE = "kairos"
SHARDS = 256
STEADY_LEAD_S = 2.0  # a steady job is due this long after its submit
HERD_LEAD_S = 4.0  # the herd is due this long after its batch is sent; the fault follows just after
SETTLE_S = 10.0  # after the last owed due instant: how long the drain waits for stragglers
QUIET_S = 3.0  # ... and for how long no new run may appear before it gives up on the rest
POLL_S = 0.2
REPORT_MARGIN_S = 15.0  # the drain ends this long before --timeout, so there is always a report
FAILOVERS = ("promote", "patroni")  # who promotes the standby in region-failover (app.drill.patroni_failover)


@dataclass(frozen=True)
class DrillOptions:
    timeout_s: float = 240.0
    herd: int = 1000
    steady_per_s: float = 10.0
    recurring: int = 20
    every_s: int = 10
    warmup_s: float = 8.0
    observe_s: float = 8.0
    lease_ttl_s: float = 3.0  # scheduler shard leases (KAIROS_LEASE_TTL_S)
    grace_s: float = 2.0  # KAIROS_REGION_TAKEOVER_GRACE_S
    synchronous: bool = True  # region-failover: synchronous streaming replication
    link_stall_s: float = 0.0  # failovers: the primary's WAL senders stopped this long before the fault
    failover: str = "promote"  # region-failover: the drill promotes at the kill, or Patroni decides ("patroni")
    patroni_ttl_s: int = 10  # --failover patroni: the leader key's TTL in etcd
    worker_concurrency: int = 16
    worker_lease_s: float = 5.0
    pg_bin: Path = PG_BIN_DEFAULT
    keep: bool = False  # keep the drill's directory (logs) afterwards

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.steady_per_s <= 0 or self.every_s < 10 or self.herd < 0:
            raise ValueError("timeout and steady rate must be > 0, every_s >= 10, herd >= 0")
        if self.failover not in FAILOVERS:
            raise ValueError(f"failover must be one of {', '.join(FAILOVERS)}")


async def until(condition: Callable[[], Awaitable[T | None]], *, timeout_s: float, what: str) -> T:
    """Poll ``condition`` until it returns something truthy; TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)


@dataclass
class Harness:
    """What one drill started, and its clean-up."""

    options: DrillOptions
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kairos-drill-")))
    started: float = field(default_factory=time.time)
    cluster: Cluster | None = None
    fleet: Fleet | None = None
    databases: list[Database] = field(default_factory=list)
    # The Fernet key every process seals and opens the drill tenant's signing secret with.
    secret_key: str = field(default_factory=sealing.new_key)

    def __post_init__(self) -> None:
        self.directory.chmod(0o755)  # the PostgreSQL user must reach the cluster below it
        self.cluster = Cluster(base_dir=self.directory, pg_bin=self.options.pg_bin)
        self.fleet = Fleet(self.directory)

    def database(self, url: str) -> Database:
        db = Database(create_engine(url, isolation="READ COMMITTED", pool_size=2))
        self.databases.append(db)
        return db

    def settings(self) -> dict[str, str]:
        o = self.options
        return {
            "KAIROS_LEASE_TTL_S": str(o.lease_ttl_s),
            "KAIROS_REGION_TAKEOVER_GRACE_S": str(o.grace_s),
            "KAIROS_DB_POOL_SIZE": "4",
            "KAIROS_LOG_LEVEL": "INFO",
            "KAIROS_SECRET_KEY": self.secret_key,
        }

    async def tenant(self, db: Database) -> tuple[UUID, str]:
        """The drill's tenant: its id and API key."""
        keyring = sealing.Keyring((self.secret_key,))
        created = await db.transaction(lambda tx: tx.tenants.create("drill", keyring=keyring))
        assert created is not None
        return created[0].tenant_id, created[1]

    def region(self, name: str, url: str, primary_region: str = "") -> RegionEnv:
        return RegionEnv(
            region=name,
            primary_region=primary_region,
            database_url=url,
            home=self.directory / f"home-{name}",
            settings=self.settings(),
        )

    def since_start(self, at: float) -> str:
        return f"+{at - self.started:.1f} s"

    async def close(self) -> None:
        for db in self.databases:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(db.close(), 5.0)
        if self.fleet is not None:
            self.fleet.close()
        if self.cluster is not None:
            self.cluster.close()
        if not self.options.keep:
            shutil.rmtree(self.directory, ignore_errors=True)


async def safely(db: Database, work: Callable[[Store], Awaitable[T]]) -> T | None:
    """One read that may meet a dead or not-yet-promoted database: None instead of an error."""
    try:
        return await db.transaction(work)
    except errors.KairosError:
        return None


async def live_shards(db: Database) -> list[LiveShards] | None:
    return await safely(db, lambda tx: drill(tx).live_shards())


def owned(
    shards: list[LiveShards] | None, *, region: str | None = None, owner_ok: Callable[[str], bool] | None = None
) -> int:
    """Live shards held in ``region`` (any) by owners ``owner_ok`` accepts (any)."""
    return sum(
        s.shards
        for s in shards or ()
        if (region is None or s.region == region) and (owner_ok is None or owner_ok(s.owner))
    )


def redacted(url: str) -> str:
    return url.split("@", 1)[-1]


async def owned_by_region(db: Database, region: str) -> bool:
    return owned(await live_shards(db), region=region) == SHARDS


async def run_drill(title: str, options: DrillOptions, body: Callable[[Harness, Report], Awaitable[None]]) -> Report:
    """Run ``body`` within --timeout; whatever happens, stop and remove everything the drill started."""
    report = Report(title, [])
    harness = Harness(options)
    try:
        async with asyncio.timeout(options.timeout_s):
            await body(harness, report)
    except TimeoutError:
        report.add("error", f"the drill did not finish within --timeout {options.timeout_s:.0f} s")
        report.ok = False
    finally:
        await harness.close()
        if options.keep:
            report.add("logs", str(harness.directory))
    return report


@dataclass
class Site:
    """One region's processes on one database (with a streaming standby when asked)."""

    db: Database
    tenant_id: UUID
    key: str
    api: Proc
    schedulers: list[Proc]
    workers: list[Proc]
    primary: Node
    standby: Node | None = None


async def single_region(
    h: Harness,
    *,
    schedulers: int,
    workers: int,
    work_s: float,
    worker_lease_s: float,
    standby: bool = False,
    concurrency: int | None = None,
) -> Site:
    assert h.cluster is not None and h.fleet is not None
    node = h.cluster.start_primary("primary")
    replica = await h.cluster.add_standby(node, "standby", synchronous=h.options.synchronous) if standby else None
    h.cluster.create_database(node, DATABASE)
    url = multi_host_url([node, replica], DATABASE) if replica else node.url(DATABASE)
    db = h.database(url)
    await migrate.upgrade(db)
    tenant_id, key = await h.tenant(db)
    env = h.region(PRIMARY, url)
    api = h.fleet.api("api", env)
    scheds = [h.fleet.scheduler(f"scheduler-{i + 1}", env) for i in range(schedulers)]
    executor = h.fleet.executor("executor", env)
    pool_workers = [
        h.fleet.worker(
            f"worker-{i + 1}",
            env,
            executor=executor,
            api_key=key,
            pool=POOL,
            concurrency=concurrency or h.options.worker_concurrency,
            lease_s=worker_lease_s,
            work_s=work_s,
        )
        for i in range(workers)
    ]
    await h.fleet.wait_ready()
    return Site(db, tenant_id, key, api, scheds, pool_workers, node, replica)


def api_url(api: Proc) -> str:
    return f"http://127.0.0.1:{api.ports['api']}"


# -- replication at the fault (the failovers) ------------------------------------------------------


async def stall_link(cluster: Cluster, primary: Node, stall_s: float) -> None:
    """--link-stall: replication held back for ``stall_s`` before the fault, as a stalled link would."""
    if stall_s > 0:
        cluster.stall_wal_senders(primary)
        await asyncio.sleep(stall_s)  # the stall itself is the fault's first half, not a wait for anything


async def wal_tail(cluster: Cluster, dead: Node, standby: Node) -> WalTail | None:
    """What the killed primary had written that the standby never received (its WAL, read after the kill)."""
    received = await standby.wal_position()
    return None if received is None else cluster.wal_not_received(dead, received)


def replication_at_failure(lag: StandbyState | None, tail: WalTail | None, synchronous: bool) -> str:
    """The replication lag at the moment of failure: what the dead primary's WAL holds beyond what the
    standby received (bytes, and committed transactions: with synchronous replication none of those
    was acknowledged to its client), and the lag the standby had last reported."""
    if lag is None or tail is None:
        return "replication lag at the failure: the standby was not connected"
    acknowledged = "none of them acknowledged to a client" if synchronous else "acknowledged or not"
    return (
        f"replication lag at the failure: {tail.bytes} bytes of WAL and {tail.commits} committed transactions "
        f"the standby never received ({acknowledged}; {lag.sync_state} standby, which had last reported "
        f"{lag.flush_lag_bytes} bytes not flushed, {lag.replay_lag_bytes} not replayed)"
    )
