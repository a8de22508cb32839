"""The database failovers: ``region-failover`` (a whole region lost; the standby region's database
promoted, by the drill or by Patroni in app/drill/patroni_failover.py) and ``db-failover`` (the
database alone fails and every Kairos process follows the promotion)."""

from __future__ import annotations

import asyncio
import time

from app.drill._flow import Flow, flow_lines, outcome_lines
from app.drill._harness import (
    DATABASE,
    POOL,
    PRIMARY,
    SHARDS,
    STANDBY,
    DrillOptions,
    Harness,
    api_url,
    owned_by_region,
    redacted,
    replication_at_failure,
    run_drill,
    single_region,
    stall_link,
    until,
    wal_tail,
)
from app.drill.cluster import multi_host_url
from app.drill.measure import Report
from app.drill.reads import drill
from app.drill.traffic import Submitter
from app.store import migrate


async def region_failover(options: DrillOptions) -> Report:
    mode = "synchronous" if options.synchronous else "asynchronous"
    if options.failover == "patroni":
        from app.drill.patroni_failover import region_failover_patroni

        return await run_drill(
            f"region-failover ({mode} replication, Patroni failover)", options, region_failover_patroni
        )
    return await run_drill(f"region-failover ({mode} replication)", options, _region_failover)


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
    report.add(
        "regions",
        f"{PRIMARY} (primary: PostgreSQL primary, api, scheduler, executor, SDK worker), "
        f"{STANDBY} (standby: {'synchronous' if o.synchronous else 'asynchronous'} streaming standby, "
        f"api, scheduler, executor, SDK worker); every process on {redacted(url)}",
    )
    urls = [f"http://127.0.0.1:{apis[r].ports['api']}" for r in (PRIMARY, STANDBY)]
    async with Submitter(urls, key) as submitter:
        flow = Flow(submitter, o, [p for p in fleet.procs if p.role == "worker"])
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault, not a wait for anything
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.3 - time.time()))
        await stall_link(cluster, primary_db, o.link_stall_s)
        # The fault: the primary region's database and every process in it, at once.
        lag = await primary_db.standby(STANDBY)
        fault_at = time.time()
        cluster.kill(primary_db)
        victims = fleet.in_region(PRIMARY)
        for proc in victims:
            fleet.kill(proc)
        tail = await wal_tail(cluster, primary_db, standby_db)
        promote_s = cluster.promote(standby_db)
        direct = h.database(standby_db.url(DATABASE))
        await until(
            lambda: owned_by_region(direct, STANDBY),
            timeout_s=max(1.0, deadline - time.monotonic()),
            what=f"{STANDBY} to own every shard",
        )
        takeover_s = time.time() - fault_at
        await asyncio.sleep(o.observe_s)  # the flow goes on after the takeover, so lag is measured on it
        result, _ = await flow.finish(fault_at, deadline, direct)
        present = await direct.transaction(
            lambda tx: drill(tx).jobs_present(tenant_id, [ow.job_id for ow in submitter.owed])
        )
    flow_lines(report, flow, result)
    report.add(
        "fault",
        f"{PRIMARY} killed at {h.since_start(fault_at)} (its PostgreSQL and {len(victims)} "
        f"processes, SIGKILL), {(fault_at - herd_due):.1f} s after the herd was due"
        + (f", its WAL senders stopped {o.link_stall_s:g} s before" if o.link_stall_s else "")
        + "; "
        + replication_at_failure(lag, tail, o.synchronous),
    )
    report.add(
        "detection time",
        "none: the drill promoted the standby itself right after the kill "
        "(--failover patroni measures a real failure detection)",
    )
    report.add(
        "promotion",
        f"{promote_s:.2f} s ({STANDBY}'s PostgreSQL accepts writes; processes follow through the multi-host URL)",
    )
    report.add(
        "takeover time",
        f"{takeover_s:.1f} s ({STANDBY} owns {SHARDS}/{SHARDS} shards; lease TTL "
        f"{o.lease_ttl_s:g} s + takeover grace {o.grace_s:g} s)",
    )
    await outcome_lines(
        report,
        direct,
        result,
        "started again once its lease expired: its worker was killed, or "
        "its outcome could not be reported while the database failed over"
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


async def database_failover(options: DrillOptions) -> Report:
    mode = "synchronous" if options.synchronous else "asynchronous"
    return await run_drill(f"db-failover ({mode} replication)", options, _database_failover)


async def _database_failover(h: Harness, report: Report) -> None:
    """The database alone fails: every Kairos process lives on and follows the promotion by itself."""
    o = h.options
    assert h.cluster is not None
    deadline = time.monotonic() + o.timeout_s
    site = await single_region(h, schedulers=1, workers=1, work_s=0.0, worker_lease_s=o.worker_lease_s, standby=True)
    assert site.standby is not None
    await until(lambda: owned_by_region(site.db, PRIMARY), timeout_s=60, what="the scheduler to own every shard")
    report.add(
        "processes",
        f"PostgreSQL primary and {'synchronous' if o.synchronous else 'asynchronous'} "
        "streaming standby; api, scheduler, executor, SDK worker on one multi-host URL "
        "(target_session_attrs=read-write)",
    )
    async with Submitter([api_url(site.api)], site.key) as submitter:
        flow = Flow(submitter, o, site.workers)
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.3 - time.time()))
        await stall_link(h.cluster, site.primary, o.link_stall_s)
        lag = await site.primary.standby("standby")
        fault_at = time.time()
        h.cluster.kill(site.primary)
        tail = await wal_tail(h.cluster, site.primary, site.standby)
        promote_s = h.cluster.promote(site.standby)
        direct = h.database(site.standby.url(DATABASE))

        async def first_start_after_fault() -> float | None:
            starts = [r.started for r in flow.runs() if r.at > fault_at]
            return min(starts) if starts else None

        recovered_at = await until(
            first_start_after_fault,
            timeout_s=max(1.0, deadline - time.monotonic()),
            what="an occurrence due after the fault to start",
        )
        await asyncio.sleep(o.observe_s)
        result, _ = await flow.finish(fault_at, deadline, direct)
        present = await direct.transaction(
            lambda tx: drill(tx).jobs_present(site.tenant_id, [ow.job_id for ow in submitter.owed])
        )
    flow_lines(report, flow, result)
    report.add(
        "fault",
        f"the primary PostgreSQL killed (SIGKILL) at {h.since_start(fault_at)}"
        + (f", its WAL senders stopped {o.link_stall_s:g} s before" if o.link_stall_s else "")
        + "; "
        + replication_at_failure(lag, tail, o.synchronous),
    )
    report.add("promotion", f"{promote_s:.2f} s")
    report.add("recovery time", f"{recovered_at - fault_at:.1f} s (the first occurrence due after the fault started)")
    await outcome_lines(
        report,
        direct,
        result,
        "started again once its lease expired: its outcome could not be "
        "reported while the database failed over"
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
