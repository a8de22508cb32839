"""RetentionPruner: archives finished executions older than KAIROS_RETENTION_DAYS, then deletes them.

Every executor runs it (``kairos executor``, and so ``kairos up``); ``kairos history archive --now``
runs the same passes by hand. A pass is one transaction per batch:

1. ``RetentionTakeExecutions`` deletes up to ``batch`` final executions (succeeded, dead, cancelled,
   skipped) whose ``finished_at`` is older than the retention, oldest first, locking them with
   ``FOR UPDATE SKIP LOCKED`` so executors running at once take different rows; their attempts go
   with them. Ready and leased executions are never taken, whatever their age.
2. The rows are written to the object store as one archive (app.store.archive), durably.
3. Only then does the transaction commit. A failed upload rolls the deletes back: nothing is lost.
   A commit that fails after the upload leaves rows that the next pass archives again, so archives
   may overlap, and ``kairos history restore`` is idempotent for that reason.

Job rows are never deleted: a job whose executions were all archived is still read, paused,
updated and run as before; its history shows what is retained. A restored execution stays for
another retention period from its restore before it is archived again. Each batch logs one line
(``history archived``) and counts ``kairos_history_archived_total{table}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app import observability
from app.config import Settings
from app.duties import run_every
from app.store import Database, Store, archive
from app.store.objects import ObjectStore, open_store

log = logging.getLogger(__name__)

RetentionDaysDefault = 30
RetentionIntervalDefault = 300.0
RetentionBatchDefault = 1000
RESTORE_CHUNK = 1000  # archived executions loaded back per transaction


@dataclass(frozen=True)
class RetentionConfig:
    # Final executions finished longer ago than this are archived; 0 keeps everything (no passes).
    retention_days: float = RetentionDaysDefault
    # How often to look for history to archive; a full batch is followed at once by the next.
    interval_s: float = RetentionIntervalDefault
    # Executions per transaction, and so per archive object.
    batch: int = RetentionBatchDefault
    # Isolation of the archiving transaction (the delete re-checks the state it locked).
    isolation: str = "READ COMMITTED"

    def __post_init__(self) -> None:
        if self.retention_days < 0 or self.interval_s <= 0 or self.batch < 1:
            raise ValueError("retention_days >= 0, interval_s > 0 and batch >= 1")

    @property
    def retention_s(self) -> float:
        return self.retention_days * 86400.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionConfig:
        return cls(
            retention_days=settings.retention_days,
            interval_s=settings.retention_interval_s,
            batch=settings.retention_batch,
        )


@dataclass(frozen=True)
class ArchiveBatch:
    """One pass's batch: where it went and what it held (key None: nothing was old enough)."""

    key: str | None = None
    executions: int = 0
    attempts: int = 0
    bytes: int = 0
    oldest: datetime | None = None
    newest: datetime | None = None


@dataclass(frozen=True)
class Restored:
    archive: str
    executions: int  # put back
    attempts: int
    executions_in_archive: int
    attempts_in_archive: int


def objects_for(settings: Settings) -> ObjectStore:
    return open_store(
        settings.archive_url, settings.home, endpoint=settings.archive_endpoint, region=settings.archive_region
    )


@dataclass
class RetentionPruner:
    db: Database
    objects: ObjectStore
    config: RetentionConfig = RetentionConfig()
    total: dict[str, int] = field(default_factory=lambda: {"executions": 0, "attempts": 0, "archives": 0})

    async def run_once(self, *, now: datetime | None = None) -> ArchiveBatch:
        """Archive and delete one batch (the database clock decides what is old, unless ``now`` is given)."""
        if self.config.retention_days == 0:
            return ArchiveBatch()
        started = time.monotonic()

        async def work(tx: Store) -> ArchiveBatch:
            executions, attempts = await tx.retention.take(self.config.batch, self.config.retention_s, now=now)
            if not executions:
                return ArchiveBatch()
            key = archive.key_for(executions)
            # Off the event loop: an executor's loop also serves the worker protocol.
            data = await asyncio.to_thread(archive.encode, executions, attempts)
            await self.objects.put(key, data)  # before the commit: the rows leave only once archived
            finished = [e["finished_at"] for e in executions]
            return ArchiveBatch(key, len(executions), len(attempts), len(data), min(finished), max(finished))

        batch = await self.db.transaction(work, isolation=self.config.isolation)
        if batch.key is not None:
            self.total["executions"] += batch.executions
            self.total["attempts"] += batch.attempts
            self.total["archives"] += 1
            observability.history_archived.add(batch.executions, {"table": "executions"})
            observability.history_archived.add(batch.attempts, {"table": "attempts"})
            log.info(
                "history archived",
                extra={
                    "archive": batch.key,
                    "store": self.objects.url,
                    "executions": batch.executions,
                    "attempts": batch.attempts,
                    "bytes": batch.bytes,
                    "oldest_finished_at": _iso(batch.oldest),
                    "newest_finished_at": _iso(batch.newest),
                    "duration_ms": round((time.monotonic() - started) * 1000),
                },
            )
        return batch

    async def drain(self, *, now: datetime | None = None, max_batches: int | None = None) -> list[ArchiveBatch]:
        """Batches until nothing old is left (or ``max_batches``): ``kairos history archive --now``."""
        done: list[ArchiveBatch] = []
        while max_batches is None or len(done) < max_batches:
            batch = await self.run_once(now=now)
            if batch.key is None:
                break
            done.append(batch)
            if batch.executions < self.config.batch:
                break
        return done

    async def run(self, stop: asyncio.Event) -> None:
        if self.config.retention_days == 0:
            log.info("history retention off (KAIROS_RETENTION_DAYS=0)")
            await stop.wait()
            return
        await run_every(
            "retention-pruner",
            self.config.interval_s,
            stop,
            self.run_once,
            again=lambda batch: batch.executions >= self.config.batch,
        )


async def restore(db: Database, objects: ObjectStore, name: str) -> Restored:
    """Load an archive back into executions and attempts (idempotent). ``name`` is a key in the object
    store (``history/2026/...``) or a file on this machine; InvalidInput when it is neither or not an archive."""
    path = Path(name)
    if await asyncio.to_thread(path.is_file):
        data = await asyncio.to_thread(path.read_bytes)
    else:
        data = await objects.get(name)
    held = await asyncio.to_thread(archive.decode, data, "ARCHIVE")
    restored_at = datetime.now(timezone.utc).isoformat()
    executions = [{**e, "restored_at": restored_at} for e in held.executions]
    put_back = attempts_back = 0
    for i in range(0, max(len(executions), 1), RESTORE_CHUNK):
        chunk = executions[i : i + RESTORE_CHUNK]
        ids = {e.get("execution_id") for e in chunk}
        chunk_attempts = [a for a in held.attempts if a.get("execution_id") in ids]

        async def put(tx: Store, c: list[Any] = chunk, a: list[Any] = chunk_attempts) -> tuple[int, int]:
            return await tx.retention.restore(c, a)

        n, m = await db.transaction(put)
        put_back += n
        attempts_back += m
    log.info(
        "history restored",
        extra={
            "archive": name,
            "executions": put_back,
            "attempts": attempts_back,
            "executions_in_archive": len(executions),
            "attempts_in_archive": len(held.attempts),
        },
    )
    return Restored(name, put_back, attempts_back, len(executions), len(held.attempts))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
