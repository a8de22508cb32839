"""The scheduler's statements: loading due rows, the fenced claim, and the batch writes.

Every function takes whole batches as lists and runs one statement over arrays (``unnest``):
nothing on the dispatch path issues a statement per row.

Arrays are sent as PostgreSQL array literals (``app.store.arrays``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol
from uuid import UUID

from app.domain.states import ExecutionState, JobState
from app.store.arrays import plain as _plain
from app.store.arrays import texts as _texts
from app.store.partitions import Partitions
from app.store.queries import q
from app.store.table import Table

# Where a shard's scan has got to: the (due_minute, next_run_at, job_id) of the last row read from it.
DueCursor = tuple[datetime, datetime, UUID]
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_FIRST: DueCursor = (_EPOCH, _EPOCH, UUID(int=0))  # before every row


@dataclass(frozen=True, slots=True)
class DueRow:
    shard_id: int
    due_minute: datetime
    next_run_at: datetime
    job_id: UUID
    tenant_id: UUID
    nominal_at: datetime
    weight: int
    max_dispatch_per_s: int


class ClaimKey(Protocol):
    """One due_index row a dispatch batch asks for, with the shard revision it was loaded under
    (read-only, so the heap's frozen entries are keys as they are)."""

    @property
    def shard_id(self) -> int: ...
    @property
    def revision(self) -> int: ...
    @property
    def due_minute(self) -> datetime: ...
    @property
    def next_run_at(self) -> datetime: ...
    @property
    def job_id(self) -> UUID: ...
    @property
    def tenant_id(self) -> UUID: ...
    @property
    def nominal_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Claim:
    """The fate of one batch row: claimed (its due row is now ours to dispatch), fenced, or vanished."""

    shard_id: int
    next_run_at: datetime
    job_id: UUID
    claimed: bool
    fenced: bool
    tenant_id: UUID | None
    nominal_at: datetime | None
    job_state: JobState | None
    schedule_kind: str | None
    cron_resolved: str | None
    tz: str | None
    jitter_s: int | None
    dst_gap: str | None
    dst_repeat: str | None
    concurrency: str | None
    misfire: str | None
    queue: str | None
    max_attempts: int | None
    overlapping: bool | None
    dry_run: bool | None = None
    end_at: datetime | None = None
    every_s: int | None = None
    job_traceparent: str | None = None
    # A run limit (maxRuns) and the occurrences started under it (app.scheduler.run_limits).
    max_runs: int | None = None
    run_count: int | None = None
    anchor_at: datetime | None = None
    buffered_at: datetime | None = None  # buffer_one: the occurrence already waiting, if any


@dataclass(frozen=True, slots=True)
class NewExecution:
    job_id: UUID
    tenant_id: UUID
    queue: str
    scheduled_for: datetime
    max_attempts: int
    state: ExecutionState  # READY or SKIPPED
    ready_at: datetime
    skip_reason: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class NextDue:
    shard_id: int
    due_minute: datetime
    next_run_at: datetime
    job_id: UUID
    tenant_id: UUID
    nominal_at: datetime


@dataclass(frozen=True, slots=True)
class JobAdvance:
    job_id: UUID
    state: JobState  # ACTIVE (cron continues) or COMPLETED (schedule ended)
    next_nominal_at: datetime | None
    next_run_at: datetime | None
    # Occurrences this dispatch started that count toward the job's run limit (maxRuns).
    runs: int = 0
    # buffer_one: this occurrence waits on the job row for the previous execution to settle.
    buffered_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Buffered:
    """A job whose buffer_one occurrence is to be settled now (app.scheduler.buffered decides how)."""

    job_id: UUID
    tenant_id: UUID
    buffered_at: datetime  # the waiting occurrence's nominal time
    job_state: JobState
    job_traceparent: str | None
    concurrency: str = "buffer_one"  # the job's overlap policy now (an update may have changed it)
    max_runs: int | None = None
    run_count: int | None = None
    in_flight: bool = False  # an execution of the job is still ready or leased


@dataclass(frozen=True, slots=True)
class BufferedOutcome:
    """How one waiting occurrence is settled: started, recorded as skipped (``skip_reason``), or only cleared."""

    start: bool
    traceparent: str | None = None
    skip_reason: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Replacement:
    job_id: UUID
    scheduled_for: datetime  # the new occurrence; older unfinished executions are cancelled
    error: str


@dataclass(frozen=True, slots=True)
class Recorded:
    ready: int
    skipped: int
    next_due: int
    advanced: int


class Dispatch(Table):
    """The dispatch statements of one transaction."""

    async def load_due(
        self,
        shard_ids: Sequence[int],
        until: datetime,
        after: Mapping[int, DueCursor] | None,
        limit: int,
        per_shard: int | None = None,
    ) -> list[DueRow]:
        """Rows due by ``until``, earliest first: each shard's next ``per_shard`` (default ``limit``) after
        its cursor in ``after`` (a shard not in it: from its first row), at most ``limit`` in all."""
        cursors = after or {}
        starts = [cursors.get(s, _FIRST) for s in shard_ids]
        rows = await self._conn.execute(
            q("DueIndexLoadShards"),
            {
                "shard_ids": _plain(shard_ids),
                "after_minutes": _plain([c[0] for c in starts]),
                "after_run_ats": _plain([c[1] for c in starts]),
                "after_job_ids": _plain([c[2] for c in starts]),
                "until": until,
                "per_shard": limit if per_shard is None else per_shard,
                "limit": limit,
            },
        )
        return [DueRow(*r) for r in rows]

    async def load_latest_due(
        self, shard_ids: Sequence[int], until: datetime, limit: int, per_shard: int | None = None
    ) -> list[DueRow]:
        """The latest ``limit`` rows due by ``until`` among each shard's latest ``per_shard`` (default ``limit``)."""
        rows = await self._conn.execute(
            q("DueIndexLoadShardsLatest"),
            {
                "shard_ids": _plain(shard_ids),
                "until": until,
                "per_shard": limit if per_shard is None else per_shard,
                "limit": limit,
            },
        )
        return [DueRow(*r) for r in rows]

    async def claim(self, owner: str, keys: Sequence[ClaimKey], now: datetime | None = None) -> list[Claim]:
        """Claim a batch; one Claim per key, in the keys' order."""
        if not keys:
            return []
        rows = await self._conn.execute(
            q("DispatchClaimDue"),
            {
                "owner": owner,
                "now": now,
                "shard_ids": _plain([k.shard_id for k in keys]),
                "revisions": _plain([k.revision for k in keys]),
                "due_minutes": _plain([k.due_minute for k in keys]),
                "next_run_ats": _plain([k.next_run_at for k in keys]),
                "job_ids": _plain([k.job_id for k in keys]),
            },
        )
        out: list[Claim | None] = [None] * len(keys)
        for ordinal, claimed, fenced, job_state, *job in rows:
            k = keys[ordinal - 1]
            out[ordinal - 1] = Claim(
                k.shard_id,
                k.next_run_at,
                k.job_id,
                claimed,
                fenced,
                k.tenant_id if claimed else None,
                k.nominal_at if claimed else None,
                JobState(job_state) if job_state is not None else None,
                *job,
            )
        assert all(c is not None for c in out), "the claim must answer every batch row"
        return out  # type: ignore[return-value]

    async def cancel_replaced(self, replacements: Sequence[Replacement], now: datetime | None = None) -> None:
        if not replacements:
            return
        await self._conn.execute(
            q("DispatchCancelReplaced"),
            {
                "now": now,
                "job_ids": _plain([r.job_id for r in replacements]),
                "scheduled_fors": _plain([r.scheduled_for for r in replacements]),
                "errors": _texts([r.error for r in replacements]),
            },
        )

    async def record(
        self,
        executions: Sequence[NewExecution],
        next_due: Sequence[NextDue],
        advances: Sequence[JobAdvance],
        now: datetime | None = None,
        *,
        traceparents: Sequence[str | None] | None = None,
    ) -> Recorded:
        """``traceparents``: one per execution (or None), the trace its attempts continue."""
        e, n, a = executions, next_due, advances
        # A catch-up may reach back past the weekly partitions kept (nothing to do in the usual case).
        await Partitions(self._conn).cover([x.scheduled_for for x in e], now=now)
        row = (
            await self._conn.execute(
                q("DispatchRecord"),
                {
                    "now": now,
                    "e_job_ids": _plain([x.job_id for x in e]),
                    "e_tenant_ids": _plain([x.tenant_id for x in e]),
                    "e_queues": _texts([x.queue for x in e]),
                    "e_scheduled_fors": _plain([x.scheduled_for for x in e]),
                    "e_max_attempts": _plain([x.max_attempts for x in e]),
                    "e_states": _texts([x.state for x in e]),
                    "e_ready_ats": _plain([x.ready_at for x in e]),
                    "e_skip_reasons": _texts([x.skip_reason for x in e]),
                    "e_notes": _texts([x.note for x in e]),
                    "e_traceparents": _texts(traceparents if traceparents is not None else [None] * len(e)),
                    "n_shard_ids": _plain([x.shard_id for x in n]),
                    "n_due_minutes": _plain([x.due_minute for x in n]),
                    "n_next_run_ats": _plain([x.next_run_at for x in n]),
                    "n_job_ids": _plain([x.job_id for x in n]),
                    "n_tenant_ids": _plain([x.tenant_id for x in n]),
                    "n_nominal_ats": _plain([x.nominal_at for x in n]),
                    "a_job_ids": _plain([x.job_id for x in a]),
                    "a_states": _texts([x.state for x in a]),
                    # Guard on the state the claim read: a job paused or cancelled since keeps its own.
                    "a_from_states": _texts(["active"] * len(a)),
                    "a_next_nominal_ats": _plain([x.next_nominal_at for x in a]),
                    "a_next_run_ats": _plain([x.next_run_at for x in a]),
                    "a_buffered_ats": _plain([x.buffered_at for x in a]),
                },
            )
        ).one()
        if counted := [x for x in a if x.runs]:
            await self._conn.execute(
                q("JobAddRunsMany"),
                {"job_ids": _plain([x.job_id for x in counted]), "runs": _plain([x.runs for x in counted])},
            )
        return Recorded(row.ready, row.skipped, row.next_due, row.advanced)

    async def lock_buffered(self, limit: int) -> list[Buffered]:
        """Lock up to ``limit`` jobs whose waiting buffer_one occurrence is to be settled now."""
        rows = await self._conn.execute(q("DispatchLockBuffered"), {"limit": limit})
        return [
            Buffered(
                r.job_id,
                r.tenant_id,
                r.buffered_at,
                JobState(r.state),
                r.traceparent,
                r.concurrency,
                r.max_runs,
                r.run_count,
                bool(r.in_flight),
            )
            for r in rows
        ]

    async def start_buffered(
        self, locked: Sequence[Buffered], outcomes: Sequence[BufferedOutcome], now: datetime | None = None
    ) -> list[tuple[UUID, datetime, str]]:
        """Clear what ``lock_buffered`` locked and settle each by its outcome: (job_id, scheduled_for, state)
        of each execution inserted (ready: started; skipped: dropped with a reason)."""
        if not locked:
            return []
        rows = await self._conn.execute(
            q("DispatchStartBuffered"),
            {
                "now": now,
                "job_ids": _plain([b.job_id for b in locked]),
                "buffered_ats": _plain([b.buffered_at for b in locked]),
                "starts": _plain([o.start for o in outcomes]),
                "traceparents": _texts([o.traceparent for o in outcomes]),
                "skip_reasons": _texts([o.skip_reason for o in outcomes]),
                "notes": _texts([o.note for o in outcomes]),
            },
        )
        return [(r.job_id, r.scheduled_for, r.state) for r in rows]
