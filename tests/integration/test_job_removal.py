"""JobRemover against the embedded PostgreSQL: finished jobs that asked to be removed go to the archive with
their history, when their delay has passed and nothing of them is left to run; nothing else is touched."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID

import pytest

from app.scheduler.removal import JobRemover, RemoverConfig
from app.store import executions as ex
from app.store.db import Database
from app.store.objects import LocalObjectStore
from tests import factories
from tests.integration.test_job_lifecycle import execute
from tests.integration.test_scheduler_duties import rows

NOW = datetime.now(timezone.utc)


async def finished_job(
    db: Database, tenant_id: UUID, *, delete_after_s: int | None, state: str = "completed", outcome: str = "succeeded"
) -> tuple[UUID, UUID]:
    """A one-off job whose execution has ended (``outcome``) and its attempt; its id and the execution's."""
    job = factories.new_job(tenant_id, at=NOW - timedelta(hours=2), delete_after_s=delete_after_s)
    await db.transaction(lambda c: c.jobs.insert_many([job]))
    [eid] = await factories.insert_ready(db, [job.job_id], [NOW - timedelta(hours=2)])
    [held] = await db.transaction(lambda c: c.executions.lease(job.queue, "w", 1, 30))
    if outcome == "succeeded":
        await db.transaction(lambda c: c.executions.complete_many([ex.Success(eid, held.attempt, {"ok": 1})]))
    else:
        await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "boom", False)]))
    await execute(
        db,
        "UPDATE jobs SET state = :s, next_nominal_at = NULL, next_run_at = NULL, "
        "paused_at = CASE WHEN state <> CAST(:s AS TEXT) AND CAST(:s AS TEXT) = 'paused' THEN now() END "
        "WHERE job_id = :j",
        s=state,
        j=job.job_id,
    )
    await execute(db, "DELETE FROM due_index WHERE job_id = :j", j=job.job_id)
    return job.job_id, eid


async def present(db: Database, job_id: UUID) -> tuple[int, int]:
    jobs = await rows(db, "SELECT 1 FROM jobs WHERE job_id = :j", j=job_id)
    executions = await rows(db, "SELECT 1 FROM executions WHERE job_id = :j", j=job_id)
    return len(jobs), len(executions)


@pytest.fixture
def remover(db: Database, tmp_path: Path) -> JobRemover:
    return JobRemover(db, LocalObjectStore(tmp_path / "objects"), RemoverConfig(batch=2))


async def test_a_finished_job_goes_to_the_archive_with_its_history_once_its_delay_passed(
    db: Database, remover: JobRemover, tmp_path: Path
) -> None:
    t = await factories.tenant(db)
    done, eid = await finished_job(db, t.tenant_id, delete_after_s=3600)
    failed, _ = await finished_job(db, t.tenant_id, delete_after_s=3600, outcome="dead")
    cancelled, _ = await finished_job(db, t.tenant_id, delete_after_s=0, state="cancelled")
    kept, _ = await finished_job(db, t.tenant_id, delete_after_s=None)
    assert (await remover.run_once(now=NOW + timedelta(minutes=30))).jobs == 1  # only the cancelled one's delay passed
    assert await present(db, cancelled) == (0, 0) and await present(db, done) == (1, 1)
    later = await remover.run_once(now=NOW + timedelta(hours=2))
    assert (later.jobs, later.executions, later.attempts) == (2, 2, 2) and len(later.archives) == 1
    assert await present(db, done) == (0, 0) and await present(db, failed) == (0, 0)
    assert await present(db, kept) == (1, 1)  # a job that did not ask stays, whatever its age
    assert not await rows(db, "SELECT 1 FROM attempts WHERE execution_id = :e", e=eid)
    lines = [
        json.loads(x) for x in gzip.decompress((tmp_path / "objects" / later.archives[0]).read_bytes()).splitlines()
    ]
    assert later.archives[0].startswith("jobs/") and "mac" in lines[-1]
    archived = {line["job"]["job_id"]: line for line in lines[:-1]}
    assert set(archived) == {str(done), str(failed)}
    [run] = archived[str(done)]["executions"]
    assert run["execution"]["execution_id"] == str(eid) and run["execution"]["state"] == "succeeded"
    assert [a["outcome"] for a in run["attempts"]] == ["succeeded"]
    assert archived[str(done)]["job"]["delete_after_s"] == 3600


async def test_a_job_with_work_left_or_not_finished_stays(db: Database, remover: JobRemover) -> None:
    t = await factories.tenant(db)
    active = factories.new_job(t.tenant_id, at=NOW - timedelta(hours=2), delete_after_s=0)
    await db.transaction(lambda c: c.jobs.insert_many([active]))
    done, _ = await finished_job(db, t.tenant_id, delete_after_s=0)
    await factories.insert_ready(db, [done], [NOW - timedelta(minutes=1)])  # a manual run still to go
    paused, _ = await finished_job(db, t.tenant_id, delete_after_s=0, state="paused")
    assert (await remover.run_once(now=NOW + timedelta(days=1))).jobs == 0
    for job_id in (active.job_id, done, paused):
        assert (await present(db, job_id))[0] == 1


async def test_a_finished_job_with_an_occurrence_waiting_or_work_in_flight_stays(
    db: Database, remover: JobRemover
) -> None:
    """Nothing of a job is removed while anything of it may still run: a buffer_one occurrence waiting on
    its row (jobs.buffered_at), or an execution ready or leased."""
    t = await factories.tenant(db)
    waiting, _ = await finished_job(db, t.tenant_id, delete_after_s=0, state="cancelled")
    await execute(db, "UPDATE jobs SET buffered_at = :at WHERE job_id = :j", at=NOW - timedelta(hours=1), j=waiting)
    leased, _ = await finished_job(db, t.tenant_id, delete_after_s=0)
    [eid] = await factories.insert_ready(db, [leased], [NOW - timedelta(minutes=1)])
    await db.transaction(lambda c: c.executions.lease(factories.tenant_queue(t.tenant_id, "work"), "w", 5, 30))
    [state] = await rows(db, "SELECT state FROM executions WHERE execution_id = :e", e=eid)
    assert state.state == "leased"
    assert (await remover.run_once(now=NOW + timedelta(days=1))).jobs == 0
    assert (await present(db, waiting))[0] == 1 and (await present(db, leased))[0] == 1
    await execute(db, "UPDATE jobs SET buffered_at = NULL WHERE job_id = :j", j=waiting)
    assert (await remover.run_once(now=NOW + timedelta(days=1))).jobs == 1  # nothing waits any more
    assert (await present(db, waiting))[0] == 0 and (await present(db, leased))[0] == 1


async def test_a_failed_upload_removes_nothing(db: Database, tmp_path: Path) -> None:
    t = await factories.tenant(db)
    done, _ = await finished_job(db, t.tenant_id, delete_after_s=0)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the store's directory should be")
    broken = JobRemover(db, LocalObjectStore(blocked), RemoverConfig())
    with pytest.raises(Exception):  # noqa: B017 - whatever the file system raises
        await broken.run_once(now=NOW + timedelta(hours=1))
    assert await present(db, done) == (1, 1)


def test_a_removed_jobs_archive_is_signed_and_refused_by_history_restore() -> None:
    from app import errors
    from app.store import archive

    data = archive.encode_jobs([{"job_id": "j", "name": "x"}], [], [])
    with pytest.raises(errors.InvalidInput, match="not a version-1 archived execution"):
        archive.decode(data, "jobs.jsonl.gz")


async def test_the_scheduler_runs_the_job_remover(db: Database, tmp_path: Path) -> None:
    import asyncio
    import dataclasses

    from app.config import Settings
    from app.scheduler.service import serve
    from tests.support.polling import poll

    t = await factories.tenant(db)
    done, _ = await finished_job(db, t.tenant_id, delete_after_s=0)
    await execute(db, "UPDATE jobs SET updated_at = now() - interval '1 minute' WHERE job_id = :j", j=done)
    settings = dataclasses.replace(Settings(), home=tmp_path, lease_ttl_s=5.0)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, db, stop), name="test.scheduler")
    try:

        async def gone() -> bool:
            return await present(db, done) == (0, 0)

        assert await poll(gone, timeout_s=15, interval_s=0.1, what="the finished job to be removed")
        assert list((tmp_path / "objects" / "jobs").rglob("*.jsonl.gz"))
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
