"""The drills: region failover, a killed scheduler, a stalled worker. Each returns a ``Report``.

Every drill follows one script: start what it needs in a temporary directory (PostgreSQL nodes,
Kairos processes, SDK workers), check the starting state (who owns the shards), let work flow
through the REST API (recurring jobs, a steady stream, a herd due just before the fault), inject
the fault, measure how long until the survivors own the work again, keep the flow going for
``observe_s``, stop submitting, let what is owed drain, and count. ``Harness`` stops and deletes
everything it started when the drill ends, fails, times out or is interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from app import errors
from app.domain.states import ExecutionState
from app.drill.cluster import PG_BIN_DEFAULT, Cluster, Node, WalTail, multi_host_url
from app.drill.fleet import Fleet, Proc, RegionEnv
from app.drill.measure import Report, Run, Tally, read_runs, tally
from app.drill.reads import LiveShards, StandbyState, drill
from app.drill.traffic import Submitter, one_off, recurring
from app.store import Database, Store, migrate, sealing
from app.store.db import create_engine

log = logging.getLogger(__name__)
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
        return {"KAIROS_LEASE_TTL_S": str(o.lease_ttl_s), "KAIROS_REGION_TAKEOVER_GRACE_S": str(o.grace_s),
                "KAIROS_DB_POOL_SIZE": "4", "KAIROS_LOG_LEVEL": "INFO", "KAIROS_SECRET_KEY": self.secret_key}

    async def tenant(self, db: Database) -> tuple[UUID, str]:
        """The drill's tenant: its id and API key."""
        keyring = sealing.Keyring((self.secret_key,))
        created = await db.transaction(lambda tx: tx.tenants.create("drill", keyring=keyring))
        assert created is not None
        return created[0].tenant_id, created[1]

    def region(self, name: str, url: str, primary_region: str = "") -> RegionEnv:
        return RegionEnv(region=name, primary_region=primary_region, database_url=url,
                         home=self.directory / f"home-{name}", settings=self.settings())

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


async def _safely(db: Database, work: Callable[[Store], Awaitable[T]]) -> T | None:
    """One read that may meet a dead or not-yet-promoted database: None instead of an error."""
    try:
        return await db.transaction(work)
    except errors.KairosError:
        return None


async def live_shards(db: Database) -> list[LiveShards] | None:
    return await _safely(db, lambda tx: drill(tx).live_shards())


def owned(shards: list[LiveShards] | None, *, region: str | None = None,
          owner_ok: Callable[[str], bool] | None = None) -> int:
    """Live shards held in ``region`` (any) by owners ``owner_ok`` accepts (any)."""
    return sum(s.shards for s in shards or () if (region is None or s.region == region)
               and (owner_ok is None or owner_ok(s.owner)))


@dataclass
class Flow:
    """The work of one drill, from submit to drain."""

    submitter: Submitter
    options: DrillOptions
    workers: list[Proc]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    steady_task: asyncio.Task[None] | None = None
    herd_due: float = 0.0

    async def start(self) -> None:
        o = self.options
        await asyncio.gather(*(self.submitter.one(recurring(f"recurring-{i}", POOL, o.every_s), "recurring",
                                                  every_s=float(o.every_s)) for i in range(o.recurring)))
        self.steady_task = asyncio.create_task(
            self.submitter.steady(self.stop, pool=POOL, rate_per_s=o.steady_per_s, lead_s=STEADY_LEAD_S),
            name="drill.steady")

    async def herd(self) -> float:
        """Send the herd, due HERD_LEAD_S from now; returns its due instant."""
        self.herd_due = time.time() + HERD_LEAD_S
        await self.submitter.many([one_off(f"herd-{i}", POOL, self.herd_due) for i in range(self.options.herd)],
                                  "herd")
        return self.herd_due

    def runs(self) -> list[Run]:
        return read_runs(p.runs_path for p in self.workers if p.runs_path is not None)

    async def succeeded(self, db: Database) -> set[tuple[UUID, float]] | None:
        """The owed occurrences whose execution succeeded, as ``db`` has them (None: it could not be read)."""
        ids = sorted({o.job_id for o in self.submitter.owed})
        executions = await _safely(db, lambda tx: drill(tx).executions_of(ids))
        if executions is None:
            return None
        return {(job, round(at.timestamp(), 3)) for job, at, state in executions
                if state == ExecutionState.SUCCEEDED}

    async def finish(self, fault_at: float, deadline: float, db: Database) -> tuple[Tally, float]:
        """Stop submitting, wait for what is owed to succeed (bounded), and count; returns (tally, until).

        An occurrence counts once ``db`` (the surviving database) has its execution succeeded: started
        is not enough, a run whose completion was lost (its worker killed, its database failed over)
        still owes its outcome."""
        self.stop.set()
        if self.steady_task is not None:
            await self.steady_task
        until = time.time() + STEADY_LEAD_S + 0.001  # every steady job acknowledged is due by then
        last_count, last_change = -1, time.monotonic()
        done: set[tuple[UUID, float]] = set()
        while True:
            done = await self.succeeded(db) or done  # a failed read keeps the last one
            result = tally(self.submitter.owed, self.runs(), fault_at=fault_at, until=until, succeeded=done)
            if result.lost == 0:
                return result, until
            now = time.monotonic()
            if result.ran != last_count:
                last_count, last_change = result.ran, now
            settled = time.time() > until + SETTLE_S and now - last_change > QUIET_S
            if settled or now > deadline - REPORT_MARGIN_S:
                return result, until
            await asyncio.sleep(POLL_S)


async def _drill(title: str, options: DrillOptions, body: Callable[[Harness, Report], Awaitable[None]]) -> Report:
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


def _flow_lines(report: Report, flow: Flow, result: Tally) -> None:
    kinds: dict[str, int] = {}
    for o in flow.submitter.owed:
        kinds[o.kind] = kinds.get(o.kind, 0) + 1
    report.add("acknowledged", f"{len(flow.submitter.owed)} jobs owing {result.owed} occurrences (herd "
               f"{kinds.get('herd', 0)}, steady {kinds.get('steady', 0)}, recurring {kinds.get('recurring', 0)} "
               f"every {flow.options.every_s} s); submits not acknowledged: {flow.submitter.refused}")


async def _where_lost(db: Database, result: Tally) -> str:
    """Where the database has the occurrences that never succeeded: still due, dispatched (and in which
    state), or nowhere."""
    ids = sorted({job for job, _ in result.lost_keys})
    due = await _safely(db, lambda tx: drill(tx).due_of(ids))
    executions = await _safely(db, lambda tx: drill(tx).executions_of(ids))
    if due is None or executions is None:
        return "the database could not be read"
    states = {(job, round(at.timestamp(), 3)): state for job, at, state in executions}
    waiting = sum(1 for job, at in result.lost_keys if job in due and round(due[job].timestamp(), 3) == at)
    dispatched: dict[str, int] = {}
    for key in result.lost_keys:
        if key in states:
            dispatched[states[key]] = dispatched.get(states[key], 0) + 1
    nowhere = result.lost - waiting - sum(dispatched.values())
    shown = ", ".join(f"{n} {state}" for state, n in sorted(dispatched.items())) or "none"
    return (f"in the database: {waiting} still waiting in due_index, dispatched: {shown}, {nowhere} with no trace; "
            f"first: {', '.join(f'{j}@{at:.3f}' for j, at in result.lost_examples)}")


async def _outcome_lines(report: Report, db: Database, result: Tally, duplicated_reason: str) -> None:
    report.add("lost", str(result.lost) + (f" ({await _where_lost(db, result)})" if result.lost else ""))
    report.add("duplicated", f"{result.duplicated}" + (f" ({duplicated_reason})" if result.duplicated else ""))
    back = "not by the end of the drill" if result.lag_back_s is None else f"{result.lag_back_s:.1f} s after the fault"
    report.add("lag back under 2 s", f"{back} (max start lag {result.max_lag_s:.1f} s; {result.late_after_fault} "
               "occurrences started 2 s late or more after the fault)")
    report.add("ran", f"{result.ran} of {result.owed} owed occurrences succeeded ({result.started} started; "
               f"{result.started_not_succeeded} started but never succeeded)")


# -- region failover -----------------------------------------------------------------------------

async def region_failover(options: DrillOptions) -> Report:
    mode = "synchronous" if options.synchronous else "asynchronous"
    if options.failover == "patroni":
        from app.drill.patroni_failover import region_failover_patroni

        return await _drill(f"region-failover ({mode} replication, Patroni failover)", options,
                            region_failover_patroni)
    return await _drill(f"region-failover ({mode} replication)", options, _region_failover)


async def _region_failover(h: Harness, report: Report) -> None:
    o = h.options
    assert h.cluster is not None and h.fleet is not None
    cluster, fleet = h.cluster, h.fleet
    deadline = time.monotonic() + o.timeout_s
    primary_db = cluster.start_primary(PRIMARY)
    standby_db = await cluster.add_standby(primary_db, STANDBY, synchronous=o.synchronous)
    cluster.create_database(primary_db, DATABASE)
    url = multi_host_url([primary_db, standby_db], DATABASE)
    db = h.database(url)
    await migrate.upgrade(db)
    tenant_id, key = await h.tenant(db)
    apis = {}
    for region in (PRIMARY, STANDBY):
        env = h.region(region, url, PRIMARY)
        apis[region] = fleet.api(f"{region}-api", env)
        fleet.scheduler(f"{region}-scheduler", env)
        executor = fleet.executor(f"{region}-executor", env)
        fleet.worker(f"{region}-worker", env, executor=executor, api_key=key, pool=POOL,
                     concurrency=o.worker_concurrency, lease_s=o.worker_lease_s, work_s=0.0)
    await fleet.wait_ready()
    await until(lambda: _owned_by_region(db, PRIMARY), timeout_s=60, what=f"{PRIMARY} to own every shard")
    report.add("regions", f"{PRIMARY} (primary: PostgreSQL primary, api, scheduler, executor, SDK worker), "
               f"{STANDBY} (standby: {'synchronous' if o.synchronous else 'asynchronous'} streaming standby, "
               f"api, scheduler, executor, SDK worker); every process on {_redacted(url)}")
    urls = [f"http://127.0.0.1:{apis[r].ports['api']}" for r in (PRIMARY, STANDBY)]
    async with Submitter(urls, key) as submitter:
        flow = Flow(submitter, o, [p for p in fleet.procs if p.role == "worker"])
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault, not a wait for anything
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.3 - time.time()))
        await _stall_link(cluster, primary_db, o.link_stall_s)
        # The fault: the primary region's database and every process in it, at once.
        lag = await primary_db.standby(STANDBY)
        fault_at = time.time()
        cluster.kill(primary_db)
        victims = fleet.in_region(PRIMARY)
        for proc in victims:
            fleet.kill(proc)
        tail = await _wal_tail(cluster, primary_db, standby_db)
        promote_s = cluster.promote(standby_db)
        direct = h.database(standby_db.url(DATABASE))
        await until(lambda: _owned_by_region(direct, STANDBY), timeout_s=max(1.0, deadline - time.monotonic()),
                    what=f"{STANDBY} to own every shard")
        takeover_s = time.time() - fault_at
        await asyncio.sleep(o.observe_s)  # the flow goes on after the takeover, so lag is measured on it
        result, _ = await flow.finish(fault_at, deadline, direct)
        present = await direct.transaction(lambda tx: drill(tx).jobs_present(
            tenant_id, [ow.job_id for ow in submitter.owed]))
    _flow_lines(report, flow, result)
    report.add("fault", f"{PRIMARY} killed at {h.since_start(fault_at)} (its PostgreSQL and {len(victims)} "
               f"processes, SIGKILL), {(fault_at - herd_due):.1f} s after the herd was due"
               + (f", its WAL senders stopped {o.link_stall_s:g} s before" if o.link_stall_s else "") + "; "
               + _replication_at_failure(lag, tail, o.synchronous))
    report.add("detection time", "none: the drill promoted the standby itself right after the kill "
               "(--failover patroni measures a real failure detection)")
    report.add("promotion", f"{promote_s:.2f} s ({STANDBY}'s PostgreSQL accepts writes; processes follow "
               "through the multi-host URL)")
    report.add("takeover time", f"{takeover_s:.1f} s ({STANDBY} owns {SHARDS}/{SHARDS} shards; lease TTL "
               f"{o.lease_ttl_s:g} s + takeover grace {o.grace_s:g} s)")
    await _outcome_lines(report, direct, result, "started again once its lease expired: its worker was killed, or "
                         "its outcome could not be reported while the database failed over"
                         + ("" if o.synchronous else ", or its completion was lost with the primary") +
                         "; same idempotency key")
    missing = len(submitter.owed) - len(present)
    report.add("missing after failover", f"{missing} of {len(submitter.owed)} acknowledged jobs are not in the "
               "promoted database")
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0 or not o.synchronous


async def _stall_link(cluster: Cluster, primary: Node, stall_s: float) -> None:
    """--link-stall: replication held back for ``stall_s`` before the fault, as a stalled link would."""
    if stall_s > 0:
        cluster.stall_wal_senders(primary)
        await asyncio.sleep(stall_s)  # the stall itself is the fault's first half, not a wait for anything


async def _wal_tail(cluster: Cluster, dead: Node, standby: Node) -> WalTail | None:
    """What the killed primary had written that the standby never received (its WAL, read after the kill)."""
    received = await standby.wal_position()
    return None if received is None else cluster.wal_not_received(dead, received)


def _replication_at_failure(lag: StandbyState | None, tail: WalTail | None, synchronous: bool) -> str:
    """The replication lag at the moment of failure: what the dead primary's WAL holds beyond what the
    standby received (bytes, and committed transactions: with synchronous replication none of those
    was acknowledged to its client), and the lag the standby had last reported."""
    if lag is None or tail is None:
        return "replication lag at the failure: the standby was not connected"
    acknowledged = "none of them acknowledged to a client" if synchronous else "acknowledged or not"
    return (f"replication lag at the failure: {tail.bytes} bytes of WAL and {tail.commits} committed transactions "
            f"the standby never received ({acknowledged}; {lag.sync_state} standby, which had last reported "
            f"{lag.flush_lag_bytes} bytes not flushed, {lag.replay_lag_bytes} not replayed)")


def _redacted(url: str) -> str:
    return url.split("@", 1)[-1]


async def _owned_by_region(db: Database, region: str) -> bool:
    return owned(await live_shards(db), region=region) == SHARDS


# -- database failover ---------------------------------------------------------------------------

async def database_failover(options: DrillOptions) -> Report:
    mode = "synchronous" if options.synchronous else "asynchronous"
    return await _drill(f"db-failover ({mode} replication)", options, _database_failover)


async def _database_failover(h: Harness, report: Report) -> None:
    """The database alone fails: every Kairos process lives on and follows the promotion by itself."""
    o = h.options
    assert h.cluster is not None
    deadline = time.monotonic() + o.timeout_s
    site = await _single_region(h, schedulers=1, workers=1, work_s=0.0, worker_lease_s=o.worker_lease_s,
                                standby=True)
    assert site.standby is not None
    await until(lambda: _owned_by_region(site.db, PRIMARY), timeout_s=60, what="the scheduler to own every shard")
    report.add("processes", f"PostgreSQL primary and {'synchronous' if o.synchronous else 'asynchronous'} "
               "streaming standby; api, scheduler, executor, SDK worker on one multi-host URL "
               "(target_session_attrs=read-write)")
    async with Submitter([_api_url(site.api)], site.key) as submitter:
        flow = Flow(submitter, o, site.workers)
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.3 - time.time()))
        await _stall_link(h.cluster, site.primary, o.link_stall_s)
        lag = await site.primary.standby("standby")
        fault_at = time.time()
        h.cluster.kill(site.primary)
        tail = await _wal_tail(h.cluster, site.primary, site.standby)
        promote_s = h.cluster.promote(site.standby)
        direct = h.database(site.standby.url(DATABASE))

        async def first_start_after_fault() -> float | None:
            starts = [r.started for r in flow.runs() if r.at > fault_at]
            return min(starts) if starts else None

        recovered_at = await until(first_start_after_fault, timeout_s=max(1.0, deadline - time.monotonic()),
                                   what="an occurrence due after the fault to start")
        await asyncio.sleep(o.observe_s)
        result, _ = await flow.finish(fault_at, deadline, direct)
        present = await direct.transaction(lambda tx: drill(tx).jobs_present(
            site.tenant_id, [ow.job_id for ow in submitter.owed]))
    _flow_lines(report, flow, result)
    report.add("fault", f"the primary PostgreSQL killed (SIGKILL) at {h.since_start(fault_at)}"
               + (f", its WAL senders stopped {o.link_stall_s:g} s before" if o.link_stall_s else "") + "; "
               + _replication_at_failure(lag, tail, o.synchronous))
    report.add("promotion", f"{promote_s:.2f} s")
    report.add("recovery time", f"{recovered_at - fault_at:.1f} s (the first occurrence due after the fault started)")
    await _outcome_lines(report, direct, result, "started again once its lease expired: its outcome could not be "
                         "reported while the database failed over"
                         + ("" if o.synchronous else ", or its completion was lost with the primary") +
                         "; same idempotency key")
    missing = len(submitter.owed) - len(present)
    report.add("missing after failover", f"{missing} of {len(submitter.owed)} acknowledged jobs are not in the "
               "promoted database")
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0 or not o.synchronous


# -- scheduler kill ------------------------------------------------------------------------------

def _owner_pid(owner: str) -> int | None:
    """``hostname:pid:random`` (app.scheduler.service.new_owner_id) -> pid."""
    parts = owner.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


async def scheduler_kill(options: DrillOptions) -> Report:
    return await _drill("scheduler-kill", options, _scheduler_kill)


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


async def _single_region(h: Harness, *, schedulers: int, workers: int, work_s: float, worker_lease_s: float,
                         standby: bool = False, concurrency: int | None = None) -> Site:
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
    pool_workers = [h.fleet.worker(f"worker-{i + 1}", env, executor=executor, api_key=key, pool=POOL,
                                   concurrency=concurrency or h.options.worker_concurrency, lease_s=worker_lease_s,
                                   work_s=work_s)
                    for i in range(workers)]
    await h.fleet.wait_ready()
    return Site(db, tenant_id, key, api, scheds, pool_workers, node, replica)


def _api_url(api: Proc) -> str:
    return f"http://127.0.0.1:{api.ports['api']}"


async def _scheduler_kill(h: Harness, report: Report) -> None:
    o = h.options
    assert h.fleet is not None
    deadline = time.monotonic() + o.timeout_s
    site = await _single_region(h, schedulers=2, workers=1, work_s=0.0, worker_lease_s=o.worker_lease_s)
    db, scheds = site.db, site.schedulers

    async def split() -> list[LiveShards] | None:
        shards = await live_shards(db)
        return shards if shards and len(shards) == 2 and owned(shards) == SHARDS else None

    before = await until(split, timeout_s=60, what="both schedulers to hold shards")
    victim = scheds[0]
    victim_owner = next(s for s in before if _owner_pid(s.owner) == victim.pid)
    report.add("processes", "PostgreSQL, api, 2 schedulers, executor, SDK worker "
               f"(shards: {', '.join(f'{s.owner} {s.shards}' for s in before)})")
    async with Submitter([_api_url(site.api)], site.key) as submitter:
        flow = Flow(submitter, o, site.workers)
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due - 0.5 - time.time()))  # killed while the herd is being dispatched
        fault_at = time.time()
        h.fleet.kill(victim)
        await until(lambda: _all_owned_by_others(db, victim_owner.owner),
                    timeout_s=max(1.0, deadline - time.monotonic()), what="the survivor to own every shard")
        takeover_s = time.time() - fault_at
        await asyncio.sleep(o.observe_s)
        result, _ = await flow.finish(fault_at, deadline, db)
    _flow_lines(report, flow, result)
    report.add("fault", f"{victim.name} ({victim_owner.owner}, {victim_owner.shards} shards) killed with SIGKILL "
               f"at {h.since_start(fault_at)}, {herd_due - fault_at:.1f} s before the herd was due")
    report.add("takeover time", f"{takeover_s:.1f} s ({scheds[1].name} owns {SHARDS}/{SHARDS} shards; lease TTL "
               f"{o.lease_ttl_s:g} s)")
    await _outcome_lines(report, db, result, "started twice; same idempotency key")
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0


async def _all_owned_by_others(db: Database, owner: str) -> bool:
    return owned(await live_shards(db), owner_ok=lambda o: o != owner) == SHARDS


# -- worker stall --------------------------------------------------------------------------------

WORK_S = 0.8  # each run of the stall drill works this long, so the stalled worker holds runs in flight
STALL_LEASE_S = 3.0
STALL_CONCURRENCY = 32  # runs each of its workers holds at once


async def worker_stall(options: DrillOptions) -> Report:
    return await _drill("worker-stall", options, _worker_stall)


def _lease_lost_lines(proc: Proc, execution_ids: set[str]) -> tuple[int, int]:
    """Lines of ``proc``'s log, about one of ``execution_ids``: (outcomes discarded, results dropped)."""
    try:
        lines = proc.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return 0, 0
    counts = {"lease lost; outcome discarded": 0, "lease lost; result dropped": 0}
    for line in lines:
        if '"lease lost; ' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") in counts and entry.get("execution_id") in execution_ids:
                    counts[entry["msg"]] += 1
    return counts["lease lost; outcome discarded"], counts["lease lost; result dropped"]


async def _worker_stall(h: Harness, report: Report) -> None:
    o = h.options
    assert h.fleet is not None
    deadline = time.monotonic() + o.timeout_s
    site = await _single_region(h, schedulers=1, workers=2, work_s=WORK_S, worker_lease_s=STALL_LEASE_S,
                                concurrency=STALL_CONCURRENCY)
    db, tenant_id = site.db, site.tenant_id
    stalled, other = site.workers
    report.add("processes", f"PostgreSQL, api, scheduler, executor, 2 SDK workers ({STALL_CONCURRENCY} runs at once "
               f"each, every run works {WORK_S:g} s; worker lease {STALL_LEASE_S:g} s, renewed every third)")
    async with Submitter([_api_url(site.api)], site.key) as submitter:
        flow = Flow(submitter, o, site.workers)
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault

        async def holding() -> list[Any] | None:
            return await _safely(db, lambda tx: drill(tx).leased_by(tenant_id, stalled.name)) or None

        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.2 - time.time()))
        await until(holding, timeout_s=30, what=f"{stalled.name} to hold leases")
        h.fleet.pause(stalled)
        fault_at = time.time()
        held = await db.transaction(lambda tx: drill(tx).leased_by(tenant_id, stalled.name))
        keys = {(x.job_id, round(x.scheduled_for.timestamp(), 3)) for x in held}
        # Only what it held counts: a lease of the stalled worker's still on its way at the pause can
        # reach it after SIGCONT, and that one's lost lease is not a late outcome of these.
        held_ids = {str(x.execution_id) for x in held}

        async def retried() -> float | None:
            again = [r.started for r in read_runs([other.runs_path] if other.runs_path else [])
                     if r.key in keys and r.started >= fault_at]
            done = {r.key for r in read_runs([other.runs_path] if other.runs_path else [])
                    if r.key in keys and r.started >= fault_at}
            return max(again) if keys and done == keys else None

        retried_at = await until(retried, timeout_s=max(1.0, deadline - time.monotonic()),
                                 what=f"{other.name} to run what {stalled.name} held")
        takeover_s = retried_at - fault_at
        h.fleet.resume(stalled)
        resumed_at = time.time()

        async def all_fenced() -> bool:
            return sum(_lease_lost_lines(stalled, held_ids)) >= len(held)

        with contextlib.suppress(TimeoutError):
            await until(all_fenced, timeout_s=10, what="the late outcomes")
        await asyncio.sleep(o.observe_s)
        result, _ = await flow.finish(fault_at, deadline, db)
        outcomes = await db.transaction(lambda tx: drill(tx).attempt_outcomes(tenant_id))
    discarded = sum(c.attempts for c in outcomes if c.worker_id == stalled.name and c.outcome == "discarded")
    expired = sum(c.attempts for c in outcomes if c.worker_id == stalled.name and c.outcome == "expired")
    _flow_lines(report, flow, result)
    report.add("fault", f"{stalled.name} stopped (SIGSTOP) at {h.since_start(fault_at)} holding {len(held)} leased "
               f"executions; resumed (SIGCONT) {resumed_at - fault_at:.1f} s later")
    report.add("takeover time", f"{takeover_s:.1f} s (its {len(held)} executions' leases expired, the reaper "
               f"returned them to the queue and {other.name} ran them)")
    refused, dropped = _lease_lost_lines(stalled, held_ids)
    report.add("late outcomes refused", f"{refused + dropped} of {len(held)} (LEASE_LOST: {refused} outcomes "
               f"refused and kept as discarded attempts, {dropped} heartbeats refused before the handler "
               f"finished; {stalled.name}'s attempts in the database: {discarded} discarded, {expired} expired)")
    await _outcome_lines(report, db, result,
                         f"the stalled worker's runs, run again by {other.name}; same idempotency key")
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0


DRILLS: dict[str, Callable[[DrillOptions], Awaitable[Report]]] = {
    "region-failover": region_failover,
    "db-failover": database_failover,
    "scheduler-kill": scheduler_kill,
    "worker-stall": worker_stall,
}
