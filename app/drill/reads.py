"""The reads the local failure drills make to judge a drill, and nothing in production makes: who owns
the shards, which acknowledged jobs survived a failover, how attempts ended, and how a PostgreSQL
standby streams. Never used on a hot path.

The statements are the drills' own catalogue, ``sql/drill/*.sql`` (loaded here alone, never part of
``sql/queries`` or the production ``Store``); the classes are store tables bound to the connection of
a ``Database.transaction`` by ``Store.bind``:

    shards = await db.transaction(lambda tx: drill(tx).live_shards())

``Replication`` is PostgreSQL only: CockroachDB replicates by itself and has no standbys to ask about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from uuid import UUID

from app.store import Store
from app.store.arrays import plain
from app.store.queries import own_statement
from app.store.table import Table

SQL_FOLDER = "drill"  # sql/drill
statement = partial(own_statement, SQL_FOLDER)


@dataclass(frozen=True)
class LiveShards:
    owner: str
    region: str | None
    shards: int


@dataclass(frozen=True)
class AttemptOutcomeCount:
    worker_id: str
    outcome: str  # succeeded | failed | expired | cancelled | discarded
    attempts: int


@dataclass(frozen=True)
class LeasedExecution:
    execution_id: UUID
    job_id: UUID
    scheduled_for: datetime
    attempt: int


@dataclass(frozen=True)
class StandbyState:
    state: str  # startup | catchup | streaming | backup | stopping
    sync_state: str  # async | potential | sync | quorum
    flush_lag_bytes: int | None  # WAL the standby has not made durable yet
    replay_lag_bytes: int | None  # WAL it has not applied yet


class Drill(Table):
    """The drill statements of one transaction."""

    async def live_shards(self) -> list[LiveShards]:
        rows = await self._conn.execute(statement("DrillShardsLive"))
        return [LiveShards(r.owner, r.region, int(r.shards)) for r in rows]

    async def jobs_present(self, tenant_id: UUID, job_ids: Sequence[UUID]) -> set[UUID]:
        if not job_ids:
            return set()
        rows = await self._conn.execute(
            statement("DrillJobsPresent"), {"tenant_id": tenant_id, "job_ids": plain(job_ids)}
        )
        return {r.job_id for r in rows}

    async def attempt_outcomes(self, tenant_id: UUID) -> list[AttemptOutcomeCount]:
        rows = await self._conn.execute(statement("DrillAttemptOutcomes"), {"tenant_id": tenant_id})
        return [AttemptOutcomeCount(r.worker_id, r.outcome, int(r.attempts)) for r in rows]

    async def leased_by(self, tenant_id: UUID, worker_id: str) -> list[LeasedExecution]:
        rows = await self._conn.execute(
            statement("DrillExecutionsLeasedBy"), {"tenant_id": tenant_id, "worker_id": worker_id}
        )
        return [LeasedExecution(r.execution_id, r.job_id, r.scheduled_for, r.attempt) for r in rows]

    async def due_of(self, job_ids: Sequence[UUID]) -> dict[UUID, datetime]:
        """job_id -> the occurrence it has waiting in due_index."""
        if not job_ids:
            return {}
        rows = await self._conn.execute(statement("DrillDueOf"), {"job_ids": plain(job_ids)})
        return {r.job_id: r.next_run_at for r in rows}

    async def executions_of(self, job_ids: Sequence[UUID]) -> list[tuple[UUID, datetime, str]]:
        """(job_id, scheduled_for, state) of every execution of these jobs."""
        if not job_ids:
            return []
        rows = await self._conn.execute(statement("DrillExecutionsOf"), {"job_ids": plain(job_ids)})
        return [(r.job_id, r.scheduled_for, r.state) for r in rows]


class Replication(Table):
    """Streaming-replication state of a PostgreSQL server (the local drills' clusters)."""

    async def standby(self, name: str) -> StandbyState | None:
        row = (await self._conn.execute(statement("ReplicationStandbyGet"), {"name": name})).first()
        if row is None:
            return None
        return StandbyState(
            state=row.state,
            sync_state=row.sync_state,
            flush_lag_bytes=row.flush_lag_bytes,
            replay_lag_bytes=row.replay_lag_bytes,
        )

    async def in_recovery(self) -> bool:
        return bool((await self._conn.execute(statement("ReplicationInRecovery"))).scalar_one())

    async def wal_position(self) -> int | None:
        """Bytes of WAL this server has (written on a primary, received on a standby); None: nothing yet."""
        text = (await self._conn.execute(statement("ReplicationWalPosition"))).scalar_one()
        return lsn_bytes(text) if text else None


def drill(tx: Store) -> Drill:
    """The drill reads of the transaction ``tx``."""
    return tx.bind(Drill)


def replication(tx: Store) -> Replication:
    """The replication reads of the transaction ``tx``."""
    return tx.bind(Replication)


def lsn_bytes(lsn: str) -> int:
    """``16/B374D848`` -> its byte position."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)
