"""JobRemover: finished jobs that asked to be removed leave the database for the archive.

A job submitted with ``deleteAfterCompletionSeconds`` (EventBridge Scheduler's ActionAfterCompletion,
Kubernetes' ttlSecondsAfterFinished) is removed once it is ``completed`` (its one-off ran, its schedule
reached endAt or maxRuns) or ``cancelled``, nothing of it is left to run, and both its last change and
its newest execution's finish are at least that many seconds old. Every scheduler runs this duty; a pass
takes batches of ``batch`` such jobs, each in one transaction:

1. delete the jobs (``JobRemovalTake``, rows locked ``FOR UPDATE SKIP LOCKED`` so schedulers removing at
   once take different jobs), then their executions and attempts, every column returned;
2. write them to the object store as one archive (``jobs/<yyyy>/<mm>/<dd>/...jsonl.gz``,
   app.store.archive.encode_jobs), durably;
3. commit.

A failed upload rolls the deletes back: a job leaves the database only in the transaction that archived
it. A commit that fails after its upload leaves the rows in place and the next pass archives them again
(two archives may then hold the same job). The large-payload object a removed job pointed to stays
(payload objects are never deleted: another job may share it). docs/retention.md, "Removing finished jobs".
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from app import observability
from app.duties import run_every
from app.store import Database, Store, archive
from app.store.objects import ObjectStore

log = logging.getLogger(__name__)

RemoverIntervalDefault = 60.0
RemoverBatchDefault = 500
RemoverMaxBatchesDefault = 20


@dataclass(frozen=True)
class RemoverConfig:
    # How often to look for finished jobs whose removal delay has passed; the first pass runs at start.
    interval_s: float = RemoverIntervalDefault
    # Jobs per transaction and per archive object.
    batch: int = RemoverBatchDefault
    # Batches per pass at most: a large backlog leaves over several passes, never in one long one.
    max_batches: int = RemoverMaxBatchesDefault

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.batch < 1 or self.max_batches < 1:
            raise ValueError("interval_s > 0, batch >= 1 and max_batches >= 1")


@dataclass(frozen=True)
class RemovalPass:
    jobs: int = 0
    executions: int = 0
    attempts: int = 0
    archives: tuple[str, ...] = ()


@dataclass
class JobRemover:
    db: Database
    objects: ObjectStore
    config: RemoverConfig = RemoverConfig()

    async def run_once(self, *, now: datetime | None = None) -> RemovalPass:
        jobs = executions = attempts = 0
        keys: list[str] = []
        for _ in range(self.config.max_batches):
            started = time.monotonic()

            async def batch(tx: Store) -> tuple[int, int, int, str | None]:
                taken = await tx.retention.take_finished_jobs(self.config.batch, now=now)
                removed, their_executions, their_attempts = taken
                if not removed:
                    return 0, 0, 0, None
                key = archive.jobs_key_for(now or datetime.now(timezone.utc))
                data = await asyncio.to_thread(archive.encode_jobs, removed, their_executions, their_attempts)
                await self.objects.put(key, data)  # before the commit: no row leaves unarchived
                return len(removed), len(their_executions), len(their_attempts), key

            n_jobs, n_executions, n_attempts, key = await self.db.transaction(batch, isolation="READ COMMITTED")
            if key is None:
                break
            jobs, executions, attempts = jobs + n_jobs, executions + n_executions, attempts + n_attempts
            keys.append(key)
            observability.history_archived.add(n_jobs, {"table": "jobs"})
            observability.history_archived.add(n_executions, {"table": "executions"})
            observability.history_archived.add(n_attempts, {"table": "attempts"})
            log.info(
                "finished jobs removed",
                extra={
                    "archive": key,
                    "store": self.objects.url,
                    "jobs": n_jobs,
                    "executions": n_executions,
                    "attempts": n_attempts,
                    "duration_ms": round((time.monotonic() - started) * 1000),
                },
            )
            if n_jobs < self.config.batch:
                break
        return RemovalPass(jobs, executions, attempts, tuple(keys))

    async def run(self, stop: asyncio.Event) -> None:
        full = self.config.batch * self.config.max_batches
        await run_every("job-remover", self.config.interval_s, stop, self.run_once, again=lambda r: r.jobs >= full)
