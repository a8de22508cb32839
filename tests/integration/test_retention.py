"""Execution-history retention: archive old final executions to the object store, delete them, restore them.

The pruner's ``run_once`` is called directly (app.executor.retention); what is old is decided by
the database clock, moved here by passing ``now`` or by ageing rows' finished_at in SQL. On
PostgreSQL the pruner takes from the legacy partitions only, so each test's database keeps its
recent history there, as a database converted while it held history does (tests/support/history.py;
weekly partitions leave whole, test_history_partitions.py).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from app import errors
from app.executor.retention import RetentionConfig, RetentionPruner, restore
from app.store import archive
from app.store import executions as ex
from app.store.db import Database
from app.store.objects import LocalObjectStore, ObjectStore, RemoteObjectStore
from tests import factories
from tests.support.history import recut_as_converted

LATER = timedelta(days=40)  # past the 30-day retention


@pytest.fixture
async def db(db: Database) -> Database:
    await recut_as_converted(db)
    return db


async def finished_executions(
    db: Database, count: int, *, dead: int = 0
) -> tuple[factories.TenantFixture, UUID, list[UUID]]:
    """A job with ``count`` executions leased once and finished: the first ``dead`` dead, the rest succeeded."""
    t = await factories.tenant(db)
    queue = factories.tenant_queue(t.tenant_id, "jobs")
    job_id = await factories.job(db, t.tenant_id, queue=queue)
    ids = await factories.ready_executions(db, job_id, count)
    leased = await db.transaction(lambda tx: tx.executions.lease(queue, "w1", count, 30))
    assert len(leased) == count
    ordered = sorted(leased, key=lambda e: ids.index(UUID(e.execution_id)))
    await db.transaction(
        lambda tx: tx.executions.fail_many(
            [ex.Failure(e.execution_id, e.attempt, "boom", retryable=False) for e in ordered[:dead]]
        )
    )
    await db.transaction(
        lambda tx: tx.executions.complete_many(
            [ex.Success(e.execution_id, e.attempt, {"ok": i}) for i, e in enumerate(ordered[dead:])]
        )
    )
    return t, job_id, ids


async def rows(db: Database, sql: str, **params: Any) -> list[dict[str, Any]]:
    async def read(conn: Any) -> list[dict[str, Any]]:
        return [dict(r._mapping) for r in await conn.execute(text(sql), params)]

    return await factories.raw(db, read)


async def execution_ids(db: Database, job_id: UUID) -> set[UUID]:
    return {
        r["execution_id"] for r in await rows(db, "SELECT execution_id FROM executions WHERE job_id = :j", j=job_id)
    }


async def age(db: Database, job_id: UUID, by: timedelta) -> None:
    async def bend(conn: Any) -> None:
        await conn.execute(
            text("UPDATE executions SET finished_at = finished_at - :by WHERE job_id = :j"), {"by": by, "j": job_id}
        )

    await factories.raw(db, bend)


def pruner(db: Database, objects: ObjectStore, **config: Any) -> RetentionPruner:
    return RetentionPruner(db, objects, RetentionConfig(**config))


async def test_old_final_executions_are_archived_then_deleted_and_live_ones_never(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t, job_id, ids = await finished_executions(db, 3, dead=1)
    queue = factories.tenant_queue(t.tenant_id, "jobs")
    live = await factories.ready_executions(db, job_id, 2, first=datetime.now(timezone.utc) - timedelta(minutes=5))
    [leased] = await db.transaction(lambda tx: tx.executions.lease(queue, "w2", 1, 30))
    before = {r["execution_id"]: r for r in await rows(db, "SELECT * FROM executions WHERE job_id = :j", j=job_id)}
    attempts_before = await rows(db, "SELECT * FROM attempts WHERE execution_id = ANY(:ids)", ids=ids)
    assert len(attempts_before) == 3
    objects = LocalObjectStore(tmp_path / "objects")
    p = pruner(db, objects)

    assert (await p.run_once()).key is None  # finished just now: nothing is 30 days old
    with caplog.at_level(logging.INFO, logger="app.executor.retention"):
        batch = await p.run_once(now=datetime.now(timezone.utc) + LATER)

    assert (batch.executions, batch.attempts) == (3, 3) and batch.key is not None
    assert batch.key.startswith(f"history/{batch.oldest:%Y/%m/%d}/") and batch.key.endswith(".jsonl.gz")
    assert await execution_ids(db, job_id) == set(live)  # the ready and the leased one stay, whatever the clock
    assert UUID(leased.execution_id) in live
    assert await rows(db, "SELECT * FROM attempts WHERE execution_id = ANY(:ids)", ids=ids) == []

    held = archive.decode(await objects.get(batch.key))
    by_id = {UUID(e["execution_id"]): e for e in held.executions}
    assert set(by_id) == set(ids)
    assert {e["state"] for e in held.executions} == {"succeeded", "dead"}
    assert set(by_id[ids[0]]) == set(before[ids[0]])  # every column of the row
    assert sorted((a["execution_id"], a["outcome"]) for a in held.attempts) == sorted(
        (str(a["execution_id"]), a["outcome"]) for a in attempts_before
    )

    # The job itself is kept and still read.
    assert await db.transaction(lambda tx: tx.jobs.get(t.tenant_id, job_id)) is not None
    [line] = [r for r in caplog.records if r.getMessage() == "history archived"]
    assert (line.archive, line.executions, line.attempts) == (batch.key, 3, 3)  # type: ignore[attr-defined]


async def test_batches_are_bounded_and_executors_pruning_at_once_take_different_rows(
    db: Database, tmp_path: Path
) -> None:
    _, job_id, ids = await finished_executions(db, 25)
    objects = LocalObjectStore(tmp_path / "objects")
    later = datetime.now(timezone.utc) + LATER
    first, second = pruner(db, objects, batch=4), pruner(db, objects, batch=4)

    done = await asyncio.gather(first.drain(now=later), second.drain(now=later))

    batches = [b for d in done for b in d]
    assert all(b.executions <= 4 for b in batches)
    archived = [e["execution_id"] for b in batches for e in archive.decode(await objects.get(b.key or "")).executions]
    assert sorted(archived) == sorted(str(i) for i in ids)  # each once: SKIP LOCKED split the work
    assert await execution_ids(db, job_id) == set()
    assert len(await objects.list("history")) == len(batches) >= 7


class FailingStore(LocalObjectStore):
    async def put(self, key: str, data: bytes) -> None:
        raise errors.ObjectStoreUnavailable("the bucket is down")


async def test_a_failed_upload_deletes_nothing(db: Database, tmp_path: Path) -> None:
    _, job_id, ids = await finished_executions(db, 3)
    with pytest.raises(errors.ObjectStoreUnavailable):
        await pruner(db, FailingStore(tmp_path)).run_once(now=datetime.now(timezone.utc) + LATER)
    assert await execution_ids(db, job_id) == set(ids)
    assert len(await rows(db, "SELECT * FROM attempts WHERE execution_id = ANY(:ids)", ids=ids)) == 3


async def test_restore_puts_back_exactly_what_was_archived_once_and_holds_it(db: Database, tmp_path: Path) -> None:
    t, job_id, ids = await finished_executions(db, 3, dead=1)
    await age(db, job_id, LATER)
    before = sorted(
        await rows(db, "SELECT * FROM executions WHERE job_id = :j", j=job_id), key=lambda r: r["execution_id"]
    )
    attempts_before = sorted(
        await rows(db, "SELECT * FROM attempts WHERE execution_id = ANY(:ids)", ids=ids),
        key=lambda r: r["execution_id"],
    )
    objects = LocalObjectStore(tmp_path / "objects")
    p = pruner(db, objects)
    batch = await p.run_once()  # the database clock: these finished 40 days ago
    assert batch.executions == 3 and batch.key is not None

    first = await restore(db, objects, batch.key)
    assert (first.executions, first.attempts, first.executions_in_archive) == (3, 3, 3)
    after = sorted(
        await rows(db, "SELECT * FROM executions WHERE job_id = :j", j=job_id), key=lambda r: r["execution_id"]
    )
    assert [{**r, "restored_at": None} for r in after] == before  # column for column
    assert all(r["restored_at"] is not None for r in after)
    assert (
        sorted(
            await rows(db, "SELECT * FROM attempts WHERE execution_id = ANY(:ids)", ids=ids),
            key=lambda r: r["execution_id"],
        )
        == attempts_before
    )
    # The dead letter is a dead letter again (the API reads the same tables).
    page = await db.transaction(lambda tx: tx.executions.list_dead(t.tenant_id, job_id=None, before=None, limit=10))
    assert [d.execution_id for d in page] == [ids[0]]

    again = await restore(db, objects, str(tmp_path / "objects" / batch.key))  # a file works as well as a key
    assert (again.executions, again.attempts) == (0, 0)

    assert (await p.run_once()).key is None  # restored rows are held for a retention period from the restore
    assert (await p.run_once(now=datetime.now(timezone.utc) + LATER)).executions == 3


async def test_restore_refuses_what_is_not_an_archive(db: Database, tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    with pytest.raises(errors.ObjectNotFound):
        await restore(db, objects, "history/2026/01/01/missing.jsonl.gz")
    await objects.put("history/bad.jsonl.gz", b"not gzip")
    with pytest.raises(errors.InvalidInput, match="not a gzipped history archive"):
        await restore(db, objects, "history/bad.jsonl.gz")
    with pytest.raises(errors.ObjectNotFound):
        await restore(db, objects, "../outside")


async def test_an_s3_compatible_store_holds_archives(db: Database) -> None:
    server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    moto = server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    try:
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
        ).create_bucket(Bucket="kairos")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ACCESS_KEY_ID", "test")
            env.setenv("AWS_SECRET_ACCESS_KEY", "test")
            objects = RemoteObjectStore("s3://kairos/prod", endpoint=endpoint, region="us-east-1")
            _, job_id, ids = await finished_executions(db, 2)
            batch = await pruner(db, objects).run_once(now=datetime.now(timezone.utc) + LATER)
            assert batch.key is not None and await objects.list("history") == [batch.key]
            assert await execution_ids(db, job_id) == set()
            assert (await restore(db, objects, batch.key)).executions == 2
            assert await execution_ids(db, job_id) == set(ids)
            with pytest.raises(errors.ObjectNotFound):
                await objects.get("history/none.jsonl.gz")
    finally:
        moto.stop()


def edited(data: bytes, change: Any) -> bytes:
    """The archive with ``change(record)`` applied to each execution line, rewritten as a person would (zcat,
    edit, gzip): every other line, the MAC line included, is kept as it was."""
    import gzip
    import json

    out = []
    for line in gzip.decompress(data).splitlines():
        record = json.loads(line)
        if "execution" in record:
            change(record)
        out.append(json.dumps(record).encode())
    return gzip.compress(b"\n".join(out) + b"\n")


async def archived_batch(db: Database, tmp_path: Path) -> tuple[factories.TenantFixture, UUID, LocalObjectStore, str]:
    t, job_id, _ = await finished_executions(db, 2)
    await age(db, job_id, LATER)
    objects = LocalObjectStore(tmp_path / "objects")
    batch = await pruner(db, objects).run_once()
    assert batch.key is not None
    return t, job_id, objects, batch.key


async def test_a_hand_edited_archive_is_refused_before_anything_is_restored(db: Database, tmp_path: Path) -> None:
    t, job_id, objects, key = await archived_batch(db, tmp_path)
    original = await objects.get(key)
    # An archived row carries exactly the columns history keeps (a new column must be added there).
    assert {frozenset(e) for e in archive.decode(original).executions} == {archive.EXECUTION_COLUMNS}

    def to_live_work(record: dict[str, Any]) -> None:
        e = record["execution"]
        e.update(state="ready", finished_at=None, payload={"rm": "-rf /"}, ready_at=e["scheduled_for"])

    forged = tmp_path / "forged.jsonl.gz"
    forged.write_bytes(edited(original, to_live_work))
    with pytest.raises(errors.InvalidInput, match="MAC"):
        await restore(db, objects, str(forged))
    assert await execution_ids(db, job_id) == set()  # nothing restored, nothing leasable
    leased = await db.transaction(
        lambda tx: tx.executions.lease(factories.tenant_queue(t.tenant_id, "jobs"), "w1", 10, 30)
    )
    assert leased == []

    # Without its MAC line at all: refused too.
    import gzip

    unsigned = tmp_path / "unsigned.jsonl.gz"
    unsigned.write_bytes(
        gzip.compress(
            b"\n".join(line for line in gzip.decompress(original).splitlines() if b'"mac"' not in line) + b"\n"
        )
    )
    with pytest.raises(errors.InvalidInput, match="MAC"):
        await restore(db, objects, str(unsigned))
    assert await execution_ids(db, job_id) == set()
    # The untouched archive still restores.
    assert (await restore(db, objects, key)).executions == 2


async def test_an_archive_signed_by_another_installation_is_refused(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.fernet import Fernet

    _, job_id, objects, key = await archived_batch(db, tmp_path)
    monkeypatch.setenv("KAIROS_SECRET_KEY", Fernet.generate_key().decode())
    with pytest.raises(errors.InvalidInput, match="MAC"):
        await restore(db, objects, key)
    assert await execution_ids(db, job_id) == set()


def test_a_signed_archive_of_live_or_unknown_columns_is_still_refused() -> None:
    """Even an archive the installation signed holds only final executions and history's columns (defence in
    depth: restore never creates live work)."""
    row = {
        "execution_id": "00000000-0000-4000-8000-000000000001",
        "job_id": "00000000-0000-4000-8000-000000000002",
        "tenant_id": "00000000-0000-4000-8000-000000000003",
        "queue": "q",
        "state": "succeeded",
        "finished_at": "2026-01-01T00:00:00+00:00",
    }
    assert archive.decode(archive.encode([row], [])).executions[0]["state"] == "succeeded"
    for bad, why in (
        ({**row, "state": "ready", "finished_at": None}, "final"),
        ({**row, "state": "leased"}, "final"),
        ({**row, "lease_owner": "w"}, "lease"),
        ({**row, "surprise": 1}, "surprise"),
    ):
        with pytest.raises(errors.InvalidInput, match=why):
            archive.decode(archive.encode([bad], []))
    attempt = {"execution_id": row["execution_id"], "attempt": 1, "outcome": "running"}
    with pytest.raises(errors.InvalidInput, match="running"):
        archive.decode(archive.encode([row], [attempt]))
