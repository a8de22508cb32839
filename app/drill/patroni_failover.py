"""``kairos drill region-failover --failover patroni``: the region failover, decided by Patroni.

The same two regions, traffic and fault as the default mode (app/drill/_failovers.py), but nobody
tells the standby to take over: each PostgreSQL runs under a Patroni member, the leader key lives
in a three-member etcd (one member per region and a witness region), and the kill of the primary
region (its Patroni, PostgreSQL and every backend, its etcd member, its Kairos processes, all
SIGKILL) is noticed only when the leader key's TTL runs out. Every Kairos process, the drill's own
reads included, is on the one multi-host URL (``target_session_attrs=read-write``) and finds the
promoted primary by itself.

What it measures, from the fault: the detection (the leader key is no longer the dead primary's:
it expired), the promotion (from the detection to the standby accepting writes), the standby
region owning every shard, and, after the drain, lost (acknowledged occurrences that never
succeeded), duplicated and the time until start lag is back under 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from app import errors
from app.drill._flow import Flow, flow_lines, outcome_lines
from app.drill._harness import (
    DATABASE,
    POOL,
    PRIMARY,
    SHARDS,
    STANDBY,
    Harness,
    owned_by_region,
    redacted,
    replication_at_failure,
    until,
    wal_tail,
)
from app.drill.cluster import ClusterError, Node, multi_host_url
from app.drill.measure import Report
from app.drill.patroni import PatroniSite
from app.drill.reads import drill
from app.drill.traffic import Submitter
from app.store import migrate

WITNESS = "witness"  # the third etcd member's region: no database, no Kairos process
WATCH_S = 0.05


@dataclass
class FailoverSeen:
    """Instants (unix seconds) the drill saw the failover's steps at."""

    detected: float | None = None  # the leader key is no longer the dead primary's
    locked: float | None = None  # the standby's Patroni holds the leader key
    writable: float | None = None  # the standby's PostgreSQL is out of recovery


async def watch_failover(site: PatroniSite, standby: Node, *, timeout_s: float) -> FailoverSeen:
    """From the fault on: when the leader key stopped being the primary's, when the standby took it,
    when the standby's PostgreSQL accepted writes."""
    seen = FailoverSeen()
    deadline = time.monotonic() + timeout_s
    while seen.writable is None or seen.locked is None:
        try:
            holder = await asyncio.to_thread(site.leader)
        except ClusterError:
            holder = PRIMARY  # etcd did not answer (its Raft group electing a leader): nothing detected yet
        now = time.time()
        if seen.detected is None and holder != PRIMARY:
            seen.detected = now
        if seen.locked is None and holder == STANDBY:
            seen.locked = now
        if seen.detected is not None and seen.writable is None:
            with contextlib.suppress(errors.KairosError):
                if not await standby.in_recovery():
                    seen.writable = time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"Patroni did not promote {STANDBY} within {timeout_s:.0f} s")
        await asyncio.sleep(WATCH_S)
    return seen


async def region_failover_patroni(h: Harness, report: Report) -> None:
    assert h.cluster is not None
    site = PatroniSite(h.cluster, synchronous=h.options.synchronous, ttl_s=h.options.patroni_ttl_s)
    try:
        await _run(h, report, site)
    finally:
        site.close()


async def _run(h: Harness, report: Report, site: PatroniSite) -> None:
    o = h.options
    assert h.cluster is not None and h.fleet is not None
    cluster, fleet = h.cluster, h.fleet
    deadline = time.monotonic() + o.timeout_s
    await asyncio.to_thread(site.start_etcd, [PRIMARY, STANDBY, WITNESS])
    first = site.start_member(PRIMARY)
    await asyncio.to_thread(site.wait_role, first, "primary")
    second = site.start_member(STANDBY)
    await cluster.wait_streaming(first.node, STANDBY, sync=o.synchronous, timeout_s=site.start_timeout_s)
    primary_db, standby_db = first.node, second.node
    cluster.create_database(primary_db, DATABASE)
    url = multi_host_url([primary_db, standby_db], DATABASE)
    db = h.database(url)  # the drill's reads follow the promotion as the processes do
    await migrate.upgrade(db)
    tenant_id, key = await h.tenant(db)
    apis = {}
    for region in (PRIMARY, STANDBY):
        env = h.region(region, url, PRIMARY)
        apis[region] = fleet.api(f"{region}-api", env)
        fleet.scheduler(f"{region}-scheduler", env)
        executor = fleet.executor(f"{region}-executor", env)
        fleet.worker(
            f"{region}-worker",
            env,
            executor=executor,
            api_key=key,
            pool=POOL,
            concurrency=o.worker_concurrency,
            lease_s=o.worker_lease_s,
            work_s=0.0,
        )
    await fleet.wait_ready()
    await until(lambda: owned_by_region(db, PRIMARY), timeout_s=60, what=f"{PRIMARY} to own every shard")
    replication = "synchronous mode" if o.synchronous else "asynchronous"
    report.add(
        "regions",
        f"{PRIMARY} (Patroni leader: PostgreSQL primary; etcd member; api, scheduler, executor, "
        f"SDK worker), {STANDBY} (Patroni replica, {replication}: streaming standby; etcd member; api, "
        f"scheduler, executor, SDK worker), {WITNESS} (etcd member only); every process on "
        f"{redacted(url)}",
    )
    report.add(
        "patroni",
        f"leader key TTL {site.ttl_s} s, loop_wait {site.loop_wait_s} s, retry_timeout "
        f"{site.retry_timeout_s} s, synchronous_mode {'on' if o.synchronous else 'off'}",
    )
    urls = [f"http://127.0.0.1:{apis[r].ports['api']}" for r in (PRIMARY, STANDBY)]
    async with Submitter(urls, key) as submitter:
        flow = Flow(submitter, o, [p for p in fleet.procs if p.role == "worker"])
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault, not a wait for anything
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.3 - time.time()))
        if o.link_stall_s > 0:
            site.stall_wal_senders(PRIMARY)
            await asyncio.sleep(o.link_stall_s)  # the stall is the fault's first half, not a wait for anything
        lag = await primary_db.standby(STANDBY)
        etcd_leader = await asyncio.to_thread(site.etcd_leader)
        # The fault: the primary region's Patroni, database, etcd member and every Kairos process, at once.
        fault_at = time.time()
        site.kill_region(PRIMARY)
        victims = fleet.in_region(PRIMARY)
        for proc in victims:
            fleet.kill(proc)
        tail = await wal_tail(cluster, primary_db, standby_db)
        seen = await watch_failover(site, standby_db, timeout_s=max(1.0, deadline - time.monotonic()))
        await until(
            lambda: owned_by_region(db, STANDBY),
            timeout_s=max(1.0, deadline - time.monotonic()),
            what=f"{STANDBY} to own every shard",
        )
        takeover_s = time.time() - fault_at
        await asyncio.sleep(o.observe_s)  # the flow goes on after the takeover, so lag is measured on it
        result, _ = await flow.finish(fault_at, deadline, db)
        present = await db.transaction(
            lambda tx: drill(tx).jobs_present(tenant_id, [ow.job_id for ow in submitter.owed])
        )
    survivors = fleet.in_region(STANDBY)
    assert seen.detected is not None and seen.locked is not None and seen.writable is not None
    flow_lines(report, flow, result)
    report.add(
        "fault",
        f"{PRIMARY} killed at {h.since_start(fault_at)} (its Patroni, PostgreSQL, etcd member and "
        f"{len(victims)} processes, SIGKILL; etcd's Raft leader was {etcd_leader or 'unknown'}), "
        f"{(fault_at - herd_due):.1f} s after the herd was due"
        + (f", its WAL senders stopped {o.link_stall_s:g} s before" if o.link_stall_s else "")
        + "; "
        + replication_at_failure(lag, tail, o.synchronous),
    )
    report.add(
        "detection time",
        f"{seen.detected - fault_at:.1f} s (the leader key in etcd expired: nothing "
        f"renewed it after the fault; TTL {site.ttl_s} s)",
    )
    report.add(
        "promotion time",
        f"{seen.writable - seen.detected:.2f} s after the detection ({STANDBY}'s Patroni "
        f"took the leader key {seen.locked - fault_at:.1f} s and its PostgreSQL accepted writes "
        f"{seen.writable - fault_at:.1f} s after the fault)",
    )
    report.add(
        "takeover time",
        f"{takeover_s:.1f} s ({STANDBY} owns {SHARDS}/{SHARDS} shards, "
        f"{fault_at + takeover_s - seen.writable:.1f} s after the promotion; shard lease TTL "
        f"{o.lease_ttl_s:g} s + takeover grace {o.grace_s:g} s, both counted from the fault)",
    )
    report.add(
        "reconnected",
        f"{sum(p.alive() for p in survivors)} of {len(survivors)} {STANDBY} processes kept "
        "running, never restarted or reconfigured: they found the new primary through the multi-host URL",
    )
    await outcome_lines(
        report,
        db,
        result,
        "started again once its lease expired: its worker was killed, or "
        "its outcome could not be reported while Patroni failed over"
        + ("" if o.synchronous else ", or its completion was lost with the primary")
        + "; same idempotency key",
    )
    missing = len(submitter.owed) - len(present)
    report.add(
        "missing after failover",
        f"{missing} of {len(submitter.owed)} acknowledged jobs are not in the promoted database",
    )
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0 or not o.synchronous
