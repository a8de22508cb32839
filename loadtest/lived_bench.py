"""The bench's `lived` scenario: the herd, steady load, the REST reads and retention on a database that
has lived, beside an empty one in the same run (so the ratios are measured side by side).

    .venv/bin/python loadtest/lived_bench.py --scale 0.02 [--parts reads,herd100k,steady,retention,heap,scheduler-start]
        [herd.py's options]

or, registered in herd.py (``--scenarios lived``), with the scale from ``--lived-scale`` when herd.py
has that option, else KAIROS_LIVED_SCALE (default 1: 2,000,000 jobs, ~23,000,000 executions; see
docs/database-at-scale.md), and the parts from KAIROS_LIVED_PARTS.

One run: the lived database is loaded by ``loadtest/lived.py`` (COPY and generate_series; its load
time and size are rows of the table); then

- reads: a ``kairos api`` on an empty database and one on the lived database, every read of
  lived.py ``--calls`` times (at least 100): p99 <= 50 ms on the lived one;
- herd100k and steady: herd.py's own scenarios, first on an empty database, then on the lived one
  (its ``Stack`` is handed the lived database instead of a fresh one): the lived herd's drain at
  least 0.9x the empty one's, small tenants' p99 <= 2 s; steady's start lag p99 <= 1 s;
- retention: while steady runs on the lived database, the oldest week of its history is retired
  as the history-partitions duty does it (archived to a local object store, detached, dropped):
  its duration, and the start lag p99 of the steady occurrences due meanwhile (<= 2 s);
- heap: bytes per scheduler heap entry with 2,000,000 loaded (loadtest/heap_memory.py under
  tracemalloc; <= 64 B);
- scheduler-start: every due_index row made overdue by up to ten minutes and due_index topped up to
  2,000,000 rows (rows of no job beyond the lived ones), then a scheduler (in this process, as
  ``kairos scheduler`` wires it) takes all 256 shards: the time from holding them to its first
  dispatch batch committed (<= 5 s), to every due row read into its heap, and the heap's bytes
  per entry at 2,000,000 (heap_memory.py, its objects summed; <= 64 B). Run it last: it dispatches
  the lived database's due rows.

Every figure is a row of herd.py's table (scenario ``lived ...``), with its target.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from app.scheduler.partitions import HistoryPartitioner, PartitionerConfig  # noqa: E402
from app.store import sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from app.store.objects import LocalObjectStore  # noqa: E402

# herd.py imports this module to register its scenario, and this module uses herd.py's machinery
# (through lived.py too): imported when the scenario runs, not at import, so neither import is circular.
bench: Any = None
lived: Any = None


def _machinery() -> None:
    global bench, lived
    from loadtest import herd as bench_module
    from loadtest import lived as lived_module

    bench, lived = bench_module, lived_module


PARTS = ("reads", "herd100k", "steady", "retention", "heap", "scheduler-start")
HEAP_ENTRIES = 2_000_000
HEAP_TARGET_B = 64
START_DUE_ROWS = 2_000_000
START_TARGET_S = 5.0
START_BACKLOG_S = 600  # the due rows are overdue by up to ten minutes: a scheduler back after an outage
START_WAIT_S = 240.0  # how long the start is watched (KAIROS_LIVED_START_WAIT_S)
DRAIN_RATIO_TARGET = 0.9
RETENTION_LAG_TARGET_S = 2.0


class LivedServer:
    """The run's Server, except that while ``lived_url`` is set, a Stack that asks for a fresh database
    gets the lived one (already loaded and migrated), and giving it back leaves it in place."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.lived_url: str | None = None

    def create(self, label: str) -> str:
        return self.lived_url or str(self.server.create(label))

    def drop(self, url: str) -> None:
        if url != self.lived_url:
            self.server.drop(url)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)


def scale_of(run: Any) -> float:
    return float(getattr(run.args, "lived_scale", None) or os.environ.get("KAIROS_LIVED_SCALE", "1"))


def clone(url: str) -> str:
    """A copy of the database at ``url`` (CREATE DATABASE ... TEMPLATE: its files copied), so every run on
    a database loaded once starts from the same rows, statistics and visibility maps."""
    source = bench.database_of(url)
    copy = f"{source}_run_{int(time.time())}"
    t0 = time.monotonic()
    with bench.psycopg.connect(bench.libpq(bench.with_database(url, "postgres")), autocommit=True) as conn:
        # FILE_COPY (PostgreSQL 15+): the files copied after a checkpoint, not written again through the
        # WAL, which would force checkpoints (and full-page writes) into the run that follows.
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
        strategy = " STRATEGY FILE_COPY" if version >= 150000 else ""
        conn.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{source}"{strategy}')
    print(f"  [lived] copied {source} to {copy} in {time.monotonic() - t0:.0f} s (no load in this run)", flush=True)
    return bench.with_database(url, copy)


def lived_size(url: str) -> int:
    with bench.psycopg.connect(bench.libpq(url), autocommit=True) as conn:
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]


def parts_of(run: Any) -> list[str]:
    given = getattr(run.args, "lived_parts", None) or os.environ.get("KAIROS_LIVED_PARTS", ",".join(PARTS))
    return [p for p in given.split(",") if p]


async def reads(run: Any, loaded: Any, blank: Any, args: argparse.Namespace) -> None:
    got: dict[str, list[Any]] = {}
    for label, db in (("empty", blank), ("lived", loaded)):
        api = lived.Api(run.procs, db, label, run.tmp / "home")
        try:
            await api.ready()
            got[label] = await lived.reads(api, args)
        finally:
            await api.client.aclose()
            run.procs.stop([api.proc], grace_s=5)
    empty = {r.name: r for r in got["empty"]}
    for r in got["lived"]:
        e = empty.get(r.name)
        if r.error:
            run.row("lived reads", r.name, "<= 50 ms", f"error: {r.error}", False)
            continue
        beside = f" (empty {e.p99_ms} ms)" if e and e.p99_ms is not None else ""
        # a process per call (the interpreter's start, not the read), or the dashboard's first refreshes
        # while the API's pooled connections plan their statements: shown, no target
        if r.name.startswith("kairos ") or "(warming)" in r.name:
            run.row("lived reads", f"{r.name} p99{beside}", "-", f"{r.p99_ms} ms", None)
        else:
            run.row(
                "lived reads",
                f"{r.name} p99 over {r.calls}{beside}",
                f"<= {lived.P99_TARGET_MS:g} ms",
                f"{r.p99_ms} ms",
                (r.p99_ms or 0) <= lived.P99_TARGET_MS,
            )
    run.results["lived"]["reads"] = {k: [vars(r) for r in v] for k, v in got.items()}


async def beside(
    run: Any, proxy: LivedServer, name: str, lived_url: str, during: Any = None
) -> dict[str, dict[str, Any]]:
    """herd.py's scenario ``name`` on an empty database, then on the lived one (``during(run)`` runs
    beside the lived pass); its rows are renamed ``name (empty)`` and ``name (lived)``."""
    out: dict[str, dict[str, Any]] = {}
    for where in ("empty", "lived"):
        proxy.lived_url = lived_url if where == "lived" else None
        # Each arm starts with no dirty pages left by what came before it (the load, its index builds and
        # VACUUM, the other arm): otherwise the checkpointer writes them back while the arm is measured.
        settled_s = checkpoint(lived_url)
        first = len(run.rows)
        try:
            if during is not None and where == "lived":
                await asyncio.gather(bench.SCENARIOS[name](run), during(run))
            else:
                await bench.SCENARIOS[name](run)
        finally:
            proxy.lived_url = None
        for row in run.rows[first:]:
            row.scenario = f"{name} ({where})"
        out[where] = run.results.pop(name, {}) | {"checkpointBeforeS": settled_s}
    return out


def checkpoint(url: str) -> float | None:
    """Seconds a CHECKPOINT took on the server of ``url``; None when this role may not run one."""
    t0 = time.monotonic()
    try:
        with bench.psycopg.connect(bench.libpq(url), autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    except bench.psycopg.errors.InsufficientPrivilege:
        print("  [lived] no CHECKPOINT before the arm (the role may not run one)", flush=True)
        return None
    took = time.monotonic() - t0
    print(f"  [lived] CHECKPOINT before the arm: {took:.1f} s", flush=True)
    return took


async def retire_oldest_week(run: Any, url: str, started: dict[str, float]) -> None:
    """Once steady's occurrences run on the lived database, retire its oldest week of history."""
    db = Database(create_engine(url, pool_size=2))
    try:
        conn = bench.psycopg.connect(bench.libpq(url), autocommit=True)
        try:
            deadline = time.monotonic() + max(60.0, run.left())
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT count(*) FROM executions AS e JOIN jobs AS j ON j.job_id = e.job_id "
                    "WHERE j.name = 'steady' AND e.state = 'succeeded'"
                ).fetchone()
                if row and row[0] > 0:
                    break
                await asyncio.sleep(1.0)
        finally:
            conn.close()
        await asyncio.sleep(10.0)  # into the steady window
        weeks = await db.read(lambda tx: tx.partitions.weeks())
        if not weeks:
            run.row("lived retention", "a week of history retired", "runs", "no weekly partition", False)
            return
        duty = HistoryPartitioner(db, LocalObjectStore(run.tmp / "archive"), PartitionerConfig(batch=10_000))
        started["t0"] = time.time()
        try:
            out = await duty.retire(weeks[0], datetime.now(timezone.utc))
        except Exception as exc:  # noqa: BLE001 - the part fails with its reason; the run and its other figures go on
            started["t1"] = time.time()
            run.row(
                "lived retention", "retire the oldest week", "runs", f"error: {str(exc).splitlines()[0][:70]}", False
            )
            return
        started["t1"] = time.time()
        if duty.drop_waits:
            run.row(
                "lived retention",
                "drops that waited for their locks and were tried again",
                "-",
                str(duty.drop_waits),
                None,
            )
        started["rows"] = float(out.executions)
        run.row(
            "lived retention",
            f"retire the oldest week ({out.executions:,} executions, {out.attempts:,} "
            f"attempts, {len(out.archives)} archives): {out.outcome}",
            "-",
            f"{out.duration_s:.1f} s",
            out.outcome == "dropped",
        )
    finally:
        await db.close()


def lag_during(url: str, t0: float, t1: float) -> float | None:
    """Start lag p99 (seconds) of the steady occurrences due between t0 and t1 (epoch seconds)."""
    with bench.psycopg.connect(bench.libpq(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT j.job_id::text, j.jitter_s, extract(epoch FROM e.scheduled_for), extract(epoch FROM a.leased_at) "
            "FROM jobs AS j JOIN executions AS e ON e.job_id = j.job_id "
            "JOIN attempts AS a ON a.execution_id = e.execution_id AND a.attempt = 1 "
            "WHERE j.name = 'steady' AND e.scheduled_for >= to_timestamp(%(lo)s) - interval '60 seconds' "
            "AND e.scheduled_for < to_timestamp(%(hi)s)",
            {"lo": t0, "hi": t1},
        ).fetchall()
    lags = []
    for job_id, jitter_s, sched, leased in rows:
        due = float(sched) + (bench.jitter_offset_s(job_id, jitter_s) if jitter_s else 0)
        if t0 <= due < t1:
            lags.append(float(leased) - due)
    return bench.pct(lags, 0.99) if lags else None


async def heap_per_entry(run: Any, *, walk: bool = False) -> None:
    """Bytes per scheduler heap entry with HEAP_ENTRIES loaded: loadtest/heap_memory.py, the component
    probe of herd.py's memory scenario, at the brief's 2,000,000 (``walk``: its heap's objects summed
    instead of under tracemalloc, which takes many minutes at that size)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "loadtest" / "heap_memory.py"),
        "--entries",
        str(HEAP_ENTRIES),
        "--timing-entries",
        "0",
        *(["--walk"] if walk else []),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        out, _ = await proc.communicate()  # under tracemalloc: a few minutes at 2,000,000
    except asyncio.CancelledError:
        proc.kill()  # the run's deadline: the probe goes with the scenario
        raise
    found = re.search(r"bytes per heap entry\s+([\d,]+) B", out.decode())
    per_entry = int(found.group(1).replace(",", "")) if found else None
    run.results["lived"]["heapBytesPerEntry"] = per_entry
    run.row(
        "lived",
        f"scheduler heap: bytes per entry, {HEAP_ENTRIES:,} loaded (component probe, "
        f"{'its objects summed' if walk else 'tracemalloc'})",
        f"<= {HEAP_TARGET_B} B",
        "-" if per_entry is None else f"{per_entry:,} B",
        per_entry is not None and per_entry <= HEAP_TARGET_B,
    )


# The lived database's own due rows (its active jobs' next occurrences, over the next 30 days) made
# overdue, then due_index topped up to START_DUE_ROWS with rows of no job (n mod 256 as the shard,
# tenants in turn): dispatch claims and deletes those and makes no execution.
START_OVERDUE = """
UPDATE due_index SET next_run_at = x.at, due_minute = date_trunc('minute', x.at), nominal_at = x.at
FROM (SELECT job_id, %(now)s - random() * %(backlog_s)s * interval '1 second' AS at
      FROM due_index WHERE next_run_at > %(now)s) AS x
WHERE x.job_id = due_index.job_id
"""
START_TOP_UP = """
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
SELECT g %% 256, date_trunc('minute', x.at), x.at, gen_random_uuid(), t.ids[1 + g %% t.n], x.at
FROM generate_series(1, %(rows)s) AS g
CROSS JOIN (SELECT array_agg(tenant_id) AS ids, count(*)::int AS n FROM tenants) AS t
CROSS JOIN LATERAL (
    SELECT %(now)s - (g::bigint * %(backlog_s)s * 1000000 / %(rows)s) * interval '1 microsecond' AS at
) AS x
"""


def overdue_due_rows(url: str, rows: int) -> dict[str, Any]:
    """Every due_index row overdue (up to START_BACKLOG_S), and ``rows`` of them in all."""
    t0 = time.monotonic()
    with bench.psycopg.connect(bench.libpq(url), autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET synchronous_commit = off")
        now = datetime.now(timezone.utc)
        params = {"now": now, "backlog_s": START_BACKLOG_S}
        conn.execute(START_OVERDUE, params)
        had = int(conn.execute("SELECT count(*) FROM due_index").fetchone()[0])  # type: ignore[index]
        if rows > had:
            # Its two unique indexes dropped and built again afterwards, as lived.py loads.
            defs = lived.take_definitions(conn)
            own = [i for i, d in enumerate(defs.indexes) if re.search(r" ON (ONLY )?(\w+\.)?due_index ", d)]
            defs = lived.Definitions(
                [c for c in defs.constraints if c[0] == "due_index"],
                [defs.indexes[i] for i in own],
                [defs.index_names[i] for i in own],
            )
            lived.drop(conn, defs)
            conn.execute(START_TOP_UP, {**params, "rows": rows - had})
            lived.rebuild(conn, defs)
        conn.execute("VACUUM ANALYZE due_index")
        total = int(conn.execute("SELECT count(*) FROM due_index").fetchone()[0])  # type: ignore[index]
    return {"jobRows": had, "topUp": max(0, rows - had), "dueRows": total, "seconds": time.monotonic() - t0}


async def measure_start(url: str, wait_s: float = START_WAIT_S) -> dict[str, Any]:
    """A scheduler (in this process, wired as ``kairos scheduler`` wires it) started on the database: when it held
    every shard, when its first dispatch batch committed, and when its first window scan had read them all."""
    from app.config import Settings
    from app.scheduler.service import Scheduler

    settings = Settings()
    db = Database.from_settings(settings, url, name="scheduler")
    scheduler = Scheduler(db, settings)
    loader, heap, totals = scheduler.loader, scheduler.heap, scheduler.dispatcher.totals
    marks: dict[str, float] = {}
    most = {"heap": 0, "read": 0}
    run_once = loader.run_once

    async def timed_once() -> Any:
        result = await run_once()
        most["read"] += result.read
        held = len(scheduler.ownership.held)
        if held == 256 and result.window_done and "loaded" not in marks and not loader._gained:
            marks["loaded"] = time.monotonic()
        return result

    loader.run_once = timed_once  # type: ignore[method-assign]
    stop = asyncio.Event()
    t0 = time.monotonic()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        while time.monotonic() - t0 < wait_s and "loaded" not in marks:
            now = time.monotonic()
            if "held" not in marks and len(scheduler.ownership.held) == 256:
                marks["held"] = now
            if "rows" not in marks and len(heap):
                marks["rows"] = now
            if "first" not in marks and totals.claimed + totals.vanished + totals.fenced > 0:
                marks["first"] = now
            most["heap"] = max(most["heap"], len(heap))
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await task
        await db.close()
    out: dict[str, Any] = {f"{k}S": round(v - t0, 2) for k, v in marks.items()}
    if "held" in marks:
        out.update({f"{k}AfterHeldS": round(v - marks["held"], 2) for k, v in marks.items() if k != "held"})
    out.update(
        {
            "watchedS": round(time.monotonic() - t0, 1),
            "rowsRead": most["read"],
            "heapPeak": most["heap"],
            "dispatched": totals.claimed + totals.vanished,
            "executions": totals.ready,
        }
    )
    return out


async def scheduler_start(run: Any, url: str) -> None:
    """The scheduler's start on START_DUE_ROWS overdue due rows, and the heap's bytes per entry."""
    print(f"  [lived] scheduler-start: due_index made {START_DUE_ROWS:,} overdue rows", flush=True)
    rows = overdue_due_rows(url, START_DUE_ROWS)
    wait_s = float(os.environ.get("KAIROS_LIVED_START_WAIT_S", START_WAIT_S))
    got = await measure_start(url, min(wait_s, max(30.0, run.left() - 60)))
    run.results["lived"]["schedulerStart"] = {"rows": rows, **got}
    run.row(
        "lived scheduler start",
        f"due_index: {rows['dueRows']:,} rows, all overdue ({rows['jobRows']:,} of jobs, "
        f"{rows['topUp']:,} of no job), made in {rows['seconds']:.0f} s",
        "-",
        f"{got['dispatched']:,} dispatched, {got['executions']:,} executions",
        None,
    )
    first = got.get("firstAfterHeldS")
    run.row(
        "lived scheduler start",
        "first dispatch batch committed, after holding all 256 shards"
        + (f" (after start: {got['firstS']} s)" if "firstS" in got else ""),
        f"<= {START_TARGET_S:g} s",
        bench.fmt_s(first),
        first is not None and first <= START_TARGET_S,
    )
    loaded = got.get("loadedAfterHeldS")
    run.row(
        "lived scheduler start",
        f"every due row read into the heap, after holding all 256 shards ({got['rowsRead']:,} read, "
        f"heap at most {got['heapPeak']:,})",
        "-",
        bench.fmt_s(loaded) if loaded is not None else f"not within {got['watchedS']:.0f} s",
        None,
    )


async def scenario_lived(run: Any) -> None:
    _machinery()
    scale, parts = scale_of(run), parts_of(run)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise bench.ScenarioFailed(f"unknown lived part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())  # the tiers open what tenants seal
    proxy = LivedServer(run.server)
    run.server = proxy
    run.results["lived"] = {"scale": scale, "parts": parts}
    reuse = os.environ.get("KAIROS_LIVED_URL")
    if reuse and "reads" in parts:
        raise bench.ScenarioFailed("the reads part needs this run's load (its tenants' keys): drop it with --lived-url")
    url = ""
    try:
        url = clone(reuse) if reuse else proxy.server.create("lived")
        args = argparse.Namespace(
            scale=scale,
            attempts="all",
            seed=run.args.seed,
            calls=max(100, int(os.environ.get("KAIROS_LIVED_CALLS", "100"))),
            cli_calls=5,
        )
        if reuse:
            size = lived_size(url)
            run.results["lived"].update({"copiedFrom": bench.database_of(reuse), "sizeBytes": size})
            run.row(
                "lived", "a copy of a database loaded before this run (--lived-url)", "-", f"{size / 1e9:.2f} GB", None
            )
        else:
            print(f"  [lived] loading scale {scale}", flush=True)
            loaded = await lived.load(url, args)
            run.results["lived"].update(
                {"loadSeconds": loaded.seconds, "rows": loaded.rows, "sizeBytes": loaded.size_bytes}
            )
            rows = ", ".join(f"{n:,} {t}" for t, n in loaded.rows.items())
            run.row(
                "lived",
                f"load at scale {scale:g}: {rows}",
                "-",
                f"{loaded.seconds['total']:.0f} s, {loaded.size_bytes / 1e9:.2f} GB",
                None,
            )
        if "reads" in parts:
            blank = await lived.empty(proxy.server.create("lived_empty"), len(loaded.tenants))
            await reads(run, loaded, blank, args)
        if "herd100k" in parts:
            herd = await beside(run, proxy, "herd100k", url)
            run.results["lived"]["herd100k"] = herd
            empty_rate, lived_rate = (herd[w].get("drainPerS") for w in ("empty", "lived"))
            ratio = lived_rate / empty_rate if empty_rate and lived_rate else None
            run.row(
                "lived",
                "herd100k drain, lived / empty",
                f">= {DRAIN_RATIO_TARGET:g}x",
                "-" if ratio is None else f"{ratio:.2f}x ({lived_rate:,.0f}/s vs {empty_rate:,.0f}/s)",
                ratio is not None and ratio >= DRAIN_RATIO_TARGET,
            )
        if "steady" in parts or "retention" in parts:
            window: dict[str, float] = {}
            during = (lambda r: retire_oldest_week(r, url, window)) if "retention" in parts else None
            steady = await beside(run, proxy, "steady", url, during)
            run.results["lived"]["steady"] = steady
            if window.get("t1"):
                p99 = lag_during(url, window["t0"], window["t1"])
                run.row(
                    "lived retention",
                    "steady start lag p99 during the retirement",
                    f"<= {RETENTION_LAG_TARGET_S:g} s",
                    bench.fmt_s(p99),
                    p99 is not None and p99 <= RETENTION_LAG_TARGET_S,
                )
        if "heap" in parts or "scheduler-start" in parts:
            # The heap's objects summed (--walk): under tracemalloc, 2,000,000 entries take 20 minutes here;
            # herd.py's memory scenario measures 1,000,000 under tracemalloc (59 B walked, 60 B traced).
            await heap_per_entry(run, walk=os.environ.get("KAIROS_LIVED_HEAP_TRACEMALLOC") != "1")
        if "scheduler-start" in parts:  # last: it dispatches (deletes) the lived database's due rows
            await scheduler_start(run, url)
    finally:
        run.server = proxy.server
        if reuse and url:
            proxy.server.drop(url)  # the copy (kept with --keep); the database it was copied from stays


SCENARIOS = {"lived": scenario_lived}


def entry() -> int:
    """Run herd.py with the lived scenario registered (herd.py's own options after ours)."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--scale", type=float, default=1.0, help="the lived database's scale (1: 2,000,000 jobs)")
    own.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated of {', '.join(PARTS)}")
    own.add_argument(
        "--lived-url",
        help="a database already loaded (lived.py --keep, or an earlier run's --keep): the parts run on a copy of it "
        "(CREATE DATABASE ... TEMPLATE), without a load; every part but reads",
    )
    mine, rest = own.parse_known_args()
    if mine.lived_url:
        os.environ["KAIROS_LIVED_URL"] = mine.lived_url
    _machinery()
    os.environ["KAIROS_LIVED_SCALE"] = str(mine.scale)
    os.environ["KAIROS_LIVED_PARTS"] = mine.parts
    bench.SCENARIOS.update(SCENARIOS)
    bench.ALL_SCENARIOS = (*bench.ALL_SCENARIOS, *SCENARIOS)
    sys.argv = [sys.argv[0], "--scenarios", "lived", *rest]
    return bench.entry()


if __name__ == "__main__":
    sys.exit(entry())
