"""An in-memory double of the store, for unit tests of the rules above the seam.

``MemoryDatabase`` stands where ``app.store.Database`` stands: ``transaction(work)`` and
``statement(work)`` hand ``work`` a ``MemoryStore`` whose tables answer the seam's methods from
dicts, as the SQL of ``sql/queries`` would (procrastinate's ``InMemoryConnector``, Oban's inline
engine). A transaction runs alone (one at a time: every schedule is serial) and is all or nothing:
a ``work`` that raises leaves the tables as they were. ``now()`` is the transaction's start, as in
PostgreSQL; a method's ``now`` argument overrides it, as ``coalesce(:now, now())`` does. It trusts
its input: the schema's CHECK constraints are the real store's alone (the contract feeds both valid rows).

It covers what the jobs service's lifecycle (pause, resume, cancel) and the dispatcher call, plus
what seeds them: ``jobs`` (insert_many, insert_due, delete_due, get, set_state, withdraw_ahead,
cancel_unstarted, record_skipped, execution_counts, executions_page), ``dispatch`` (load_due,
claim, cancel_replaced, record) and ``shard_leases`` (acquire, renew, list_all). Any other method
raises NotImplementedError: add it together with its case in
tests/integration/test_store_double_contract.py, which runs the same assertions against the real
store (the embedded PostgreSQL) and this double, so the two cannot drift apart.

It lives under tests/, not app/store: it is test support, and the production seam holds only
production (a reader of app/store never wonders whether a tier may run on it).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar
from uuid import UUID

import msgspec

from app import errors
from app.domain.shards import SHARD_COUNT, due_minute, shard_of
from app.domain.states import ExecutionState, JobState
from app.store.dispatch import (
    Buffered,
    BufferedOutcome,
    Claim,
    ClaimKey,
    DueRow,
    JobAdvance,
    NewExecution,
    NextDue,
    Recorded,
    Replacement,
)
from app.store.jobs import ExecutionCounts, ExecutionSummary, Job, NewJob
from app.store.shard_leases import HeldShard, ShardLease

T = TypeVar("T")
_OPEN = (ExecutionState.READY, ExecutionState.LEASED)
_NEW_JOB_FIELDS = tuple(f.name for f in msgspec.structs.fields(NewJob) if f.name != "payload_json")


@dataclass
class _Tenant:
    tenant_id: UUID
    weight: int = 1
    max_dispatch_per_s: int = 5000


@dataclass
class _Execution:
    execution_id: UUID
    job_id: UUID
    tenant_id: UUID
    queue: str
    scheduled_for: datetime
    max_attempts: int
    state: ExecutionState
    ready_at: datetime
    dispatched_at: datetime
    attempt: int = 0
    trigger: str = "schedule"
    finished_at: datetime | None = None
    started_at: datetime | None = None
    lease_owner: str | None = None
    lease_until: datetime | None = None
    skip_reason: str | None = None
    error: str | None = None
    traceparent: str | None = None


@dataclass
class _Attempt:
    execution_id: UUID
    attempt: int
    tenant_id: UUID
    worker_id: str | None
    leased_at: datetime | None
    lease_until: datetime | None
    finished_at: datetime
    outcome: str
    error: str | None


@dataclass
class _Lease:
    owner: str | None = None
    lease_until: datetime | None = None
    revision: int = 0
    region: str | None = None


@dataclass
class Tables:
    """Every row the double holds; a transaction works on a copy and keeps it only on success."""

    tenants: dict[UUID, _Tenant] = field(default_factory=dict)
    jobs: dict[UUID, Job] = field(default_factory=dict)
    due: dict[UUID, NextDue] = field(default_factory=dict)  # one due row per job, by job id
    executions: dict[UUID, _Execution] = field(default_factory=dict)
    attempts: dict[tuple[UUID, int], _Attempt] = field(default_factory=dict)
    leases: dict[int, _Lease] = field(default_factory=lambda: {s: _Lease() for s in range(SHARD_COUNT)})


class _Table:
    def __init__(self, tables: Tables, now: datetime) -> None:
        self._t = tables
        self._now = now

    def _at(self, now: datetime | None) -> datetime:
        return self._now if now is None else now


class _Missing:
    """A table (or a method) the double does not have yet."""

    def __init__(self, table: str) -> None:
        self._table = table

    def __getattr__(self, name: str) -> Any:
        raise NotImplementedError(
            f"the memory store has no {self._table}.{name}: add it with its case in "
            "tests/integration/test_store_double_contract.py"
        )


class MemoryJobs(_Table):
    async def insert_many(self, jobs: Sequence[NewJob]) -> set[UUID]:
        taken = {(j.tenant_id, j.idempotency_key) for j in self._t.jobs.values() if j.idempotency_key is not None}
        inserted: set[UUID] = set()
        for new in jobs:
            if new.idempotency_key is not None:
                key = (new.tenant_id, new.idempotency_key)
                if key in taken:
                    continue
                taken.add(key)
            fields = {name: getattr(new, name) for name in _NEW_JOB_FIELDS}
            if new.payload_ref is not None:
                fields["payload"] = None
            self._t.jobs[new.job_id] = Job(
                **fields,
                state=JobState.ACTIVE,
                first_run_at=new.next_run_at,
                paused_at=None,
                version=1,
                created_at=self._now,
                updated_at=self._now,
            )
            self._t.due[new.job_id] = NextDue(
                shard_of(new.job_id),
                due_minute(new.next_run_at),
                new.next_run_at,
                new.job_id,
                new.tenant_id,
                new.next_nominal_at,
            )
            inserted.add(new.job_id)
        return inserted

    async def insert_due(self, job_id: UUID, tenant_id: UUID, nominal_at: datetime, run_at: datetime) -> None:
        if job_id in self._t.due:
            raise errors.StoreConflict("a job has one due row", sqlstate="23505")
        self._t.due[job_id] = NextDue(shard_of(job_id), due_minute(run_at), run_at, job_id, tenant_id, nominal_at)

    async def delete_due(self, job_id: UUID) -> bool:
        return self._t.due.pop(job_id, None) is not None

    async def get(self, tenant_id: UUID, job_id: UUID, *, for_update: bool = False) -> Job | None:
        job = self._t.jobs.get(job_id)
        if job is None or job.tenant_id != tenant_id:
            return None
        if for_update:  # JobGetForUpdate reads the row alone
            return _plain(job)
        mine = [e for e in self._t.executions.values() if e.job_id == job_id]
        finished = [e for e in mine if e.state not in _OPEN]
        last = max(finished, key=lambda e: e.scheduled_for, default=None)
        return msgspec.structs.replace(
            job,
            last_outcome=last.state if last else None,
            last_finished_at=last.finished_at if last else None,
            has_open=any(e.state in _OPEN for e in mine),
        )

    async def set_state(
        self, job: Job, to_state: JobState, *, next_nominal_at: datetime | None, next_run_at: datetime | None
    ) -> Job | None:
        row = self._t.jobs.get(job.job_id)
        if (
            row is None
            or row.tenant_id != job.tenant_id
            or row.state != job.state
            or row.version != job.version
            or row.updated_at != job.updated_at
        ):
            return None
        row.state = to_state
        row.paused_at = self._now if to_state == JobState.PAUSED else None
        row.next_nominal_at, row.next_run_at = next_nominal_at, next_run_at  # type: ignore[assignment]
        row.buffered_at = None  # the caller records the waiting occurrence it drops
        row.version += 1
        row.updated_at = self._now
        return _plain(row)

    async def withdraw_ahead(self, tenant_id: UUID, job_id: UUID, now: datetime | None = None) -> list[datetime]:
        at = self._at(now)
        gone = [
            e
            for e in self._t.executions.values()
            if e.job_id == job_id
            and e.tenant_id == tenant_id
            and e.state == ExecutionState.READY
            and e.attempt == 0
            and e.trigger == "schedule"
            and e.ready_at > at
        ]
        for e in gone:
            del self._t.executions[e.execution_id]
        return [e.scheduled_for for e in gone]

    async def cancel_unstarted(self, tenant_id: UUID, job_id: UUID) -> int:
        ready = [
            e
            for e in self._t.executions.values()
            if e.job_id == job_id and e.tenant_id == tenant_id and e.state == ExecutionState.READY
        ]
        for e in ready:
            e.state, e.finished_at, e.error = ExecutionState.CANCELLED, self._now, "job cancelled"
        return len(ready)

    async def record_skipped(
        self, job_id: UUID, tenant_id: UUID, queue: str, max_attempts: int, scheduled_for: list[datetime], reason: str
    ) -> None:
        for at in scheduled_for:
            _insert_execution(
                self._t,
                _Execution(
                    uuid.uuid4(),
                    job_id,
                    tenant_id,
                    queue,
                    at,
                    max_attempts,
                    ExecutionState.SKIPPED,
                    ready_at=self._now,
                    dispatched_at=self._now,
                    finished_at=self._now,
                    skip_reason=reason,
                ),
            )

    async def execution_counts(self, tenant_id: UUID, job_id: UUID, newest: int | None = None) -> ExecutionCounts:
        by: dict[str, int] = {}
        mine = [e for e in self._t.executions.values() if e.job_id == job_id and e.tenant_id == tenant_id]
        mine.sort(key=lambda e: e.scheduled_for, reverse=True)
        for e in mine if newest is None else mine[:newest]:
            by[e.state] = by.get(e.state, 0) + 1
        return ExecutionCounts(
            succeeded=by.get("succeeded", 0),
            dead=by.get("dead", 0),
            cancelled=by.get("cancelled", 0),
            skipped=by.get("skipped", 0),
            pending=by.get("ready", 0) + by.get("leased", 0),
        )

    async def executions_page(
        self, tenant_id: UUID, job_id: UUID, *, before: tuple[datetime, UUID] | None, limit: int
    ) -> list[ExecutionSummary]:
        rows = sorted(
            (
                e
                for e in self._t.executions.values()
                if e.job_id == job_id and e.tenant_id == tenant_id and (before is None or e.scheduled_for < before[0])
            ),
            key=lambda e: e.scheduled_for,
            reverse=True,
        )[:limit]
        out = []
        for e in rows:
            starts = [
                a.leased_at
                for a in self._t.attempts.values()
                if a.execution_id == e.execution_id and a.leased_at is not None
            ]
            out.append(
                ExecutionSummary(
                    e.execution_id,
                    e.scheduled_for,
                    e.attempt,
                    e.state,
                    e.started_at,
                    e.finished_at,
                    e.error,
                    e.skip_reason,
                    e.trigger,
                    e.dispatched_at,
                    e.traceparent,
                    min(starts) if starts else e.started_at,
                )
            )
        return out


class MemoryDispatch(_Table):
    async def load_due(
        self,
        shard_ids: Sequence[int],
        until: datetime,
        after: Mapping[int, tuple[datetime, datetime, UUID]] | None,
        limit: int,
        per_shard: int | None = None,
    ) -> list[DueRow]:
        cursors = after or {}
        picked = []
        for shard in set(shard_ids):
            cursor = cursors.get(shard)
            picked += sorted(
                (
                    d
                    for d in self._t.due.values()
                    if d.shard_id == shard
                    and d.due_minute <= due_minute(until)
                    and d.next_run_at <= until
                    and (cursor is None or (d.due_minute, d.next_run_at, d.job_id) > cursor)
                ),
                key=lambda d: (d.due_minute, d.next_run_at, d.job_id),
            )[: limit if per_shard is None else per_shard]
        rows = sorted(picked, key=lambda d: (d.due_minute, d.next_run_at, d.job_id))[:limit]
        return [
            DueRow(
                d.shard_id,
                d.due_minute,
                d.next_run_at,
                d.job_id,
                d.tenant_id,
                d.nominal_at,
                self._t.tenants[d.tenant_id].weight,
                self._t.tenants[d.tenant_id].max_dispatch_per_s,
            )
            for d in rows
        ]

    async def claim(self, owner: str, keys: Sequence[ClaimKey], now: datetime | None = None) -> list[Claim]:
        at = self._at(now)
        out = []
        for k in keys:
            lease = self._t.leases[k.shard_id]
            held = (
                lease.owner == owner
                and lease.revision == k.revision
                and lease.lease_until is not None
                and lease.lease_until > at
            )
            due = self._t.due.get(k.job_id)
            claimed = (
                held
                and due is not None
                and (due.shard_id, due.due_minute, due.next_run_at) == (k.shard_id, k.due_minute, k.next_run_at)
            )
            if not claimed or due is None:
                out.append(
                    Claim(
                        k.shard_id,
                        k.next_run_at,
                        k.job_id,
                        False,
                        not held,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        False,
                    )
                )
                continue
            del self._t.due[k.job_id]
            j = self._t.jobs[k.job_id]
            overlapping = j.concurrency != "allow" and any(
                e.job_id == j.job_id and e.state in _OPEN and e.scheduled_for != due.nominal_at
                for e in self._t.executions.values()
            )
            out.append(
                Claim(
                    k.shard_id,
                    k.next_run_at,
                    k.job_id,
                    True,
                    False,
                    k.tenant_id,
                    k.nominal_at,
                    JobState(j.state),
                    j.schedule_kind,
                    j.cron_resolved,
                    j.tz,
                    j.jitter_s,
                    j.dst_gap,
                    j.dst_repeat,
                    j.concurrency,
                    j.misfire,
                    j.queue,
                    j.max_attempts,
                    overlapping,
                    j.dry_run,
                    j.end_at,
                    j.every_s,
                    j.traceparent,
                    j.max_runs,
                    j.run_count,
                    j.anchor_at,
                    j.buffered_at,
                )
            )
        return out

    async def cancel_replaced(self, replacements: Sequence[Replacement], now: datetime | None = None) -> None:
        at = self._at(now)
        victims: dict[UUID, Replacement] = {}
        for r in sorted(replacements, key=lambda r: r.scheduled_for, reverse=True):
            for e in self._t.executions.values():
                if e.job_id == r.job_id and e.scheduled_for < r.scheduled_for and e.state in _OPEN:
                    victims.setdefault(e.execution_id, r)
        for execution_id, r in victims.items():
            e = self._t.executions[execution_id]
            if e.state == ExecutionState.LEASED:
                self._t.attempts[(e.execution_id, e.attempt)] = _Attempt(
                    e.execution_id,
                    e.attempt,
                    e.tenant_id,
                    e.lease_owner,
                    e.started_at,
                    e.lease_until,
                    at,
                    "cancelled",
                    "replaced",
                )
            e.state, e.lease_owner, e.lease_until, e.finished_at, e.error = (
                ExecutionState.CANCELLED,
                None,
                None,
                at,
                r.error,
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
        at = self._at(now)
        ready = skipped = due_rows = advanced = 0
        for i, x in enumerate(executions):
            row = _Execution(
                uuid.uuid4(),
                x.job_id,
                x.tenant_id,
                x.queue,
                x.scheduled_for,
                x.max_attempts,
                ExecutionState(x.state),
                x.ready_at,
                dispatched_at=at,
                finished_at=at if x.state == ExecutionState.SKIPPED else None,
                skip_reason=x.skip_reason,
                error=x.note,
                traceparent=traceparents[i] if traceparents is not None else None,
            )
            if _insert_execution(self._t, row):
                ready += row.state == ExecutionState.READY
                skipped += row.state == ExecutionState.SKIPPED
        for n in next_due:
            if n.job_id not in self._t.due:  # one due row per job: a row the API wrote meanwhile wins
                self._t.due[n.job_id] = n
                due_rows += 1
        for a in advances:
            job = self._t.jobs.get(a.job_id)
            if job is not None and job.state == JobState.ACTIVE:  # the state the claim read
                job.state, job.next_nominal_at, job.next_run_at = a.state, a.next_nominal_at, a.next_run_at  # type: ignore[assignment]
                job.buffered_at = job.buffered_at or a.buffered_at
                job.updated_at = at
                advanced += 1
        return Recorded(ready, skipped, due_rows, advanced)

    async def lock_buffered(self, limit: int) -> list[Buffered]:
        waiting = sorted(
            (j for j in self._t.jobs.values() if j.buffered_at is not None),
            key=lambda j: j.buffered_at or datetime.min,
        )
        out: list[Buffered] = []
        for j in waiting:
            if len(out) == limit:
                break
            open_ = any(e.job_id == j.job_id and e.state in _OPEN for e in self._t.executions.values())
            live = j.state in (JobState.ACTIVE, JobState.COMPLETED)
            if not live or j.concurrency != "buffer_one" or not open_:
                assert j.buffered_at is not None
                in_flight = j.state == JobState.ACTIVE and j.concurrency != "allow" and open_
                out.append(
                    Buffered(
                        j.job_id, j.tenant_id, j.buffered_at, JobState(j.state), j.traceparent,
                        j.concurrency, j.max_runs, j.run_count, in_flight,
                    )
                )  # fmt: skip
        return out

    async def start_buffered(
        self, locked: Sequence[Buffered], outcomes: Sequence[BufferedOutcome], now: datetime | None = None
    ) -> list[tuple[UUID, datetime, str]]:
        at = self._at(now)
        inserted: list[tuple[UUID, datetime, str]] = []
        for b, o in zip(locked, outcomes, strict=True):
            j = self._t.jobs.get(b.job_id)
            if j is None or j.buffered_at != b.buffered_at:
                continue
            j.buffered_at = None
            if o.start:
                count = (j.run_count or 0) + 1
                if j.max_runs is not None:
                    j.run_count = count
                limit_reached = j.max_runs is not None and count >= j.max_runs
                if j.state == JobState.ACTIVE and (j.next_run_at is None or limit_reached):
                    j.state, j.updated_at = JobState.COMPLETED, at
                    if limit_reached:
                        j.next_run_at = j.next_nominal_at = None  # type: ignore[assignment]
                if j.state == JobState.COMPLETED:
                    self._t.due.pop(j.job_id, None)
                row = _Execution(
                    uuid.uuid4(), j.job_id, j.tenant_id, j.queue, b.buffered_at, j.max_attempts, ExecutionState.READY,
                    at, dispatched_at=at, traceparent=o.traceparent,
                )  # fmt: skip
            elif o.skip_reason is not None:
                row = _Execution(
                    uuid.uuid4(), j.job_id, j.tenant_id, j.queue, b.buffered_at, j.max_attempts,
                    ExecutionState.SKIPPED, at, dispatched_at=at, finished_at=at, skip_reason=o.skip_reason,
                    error=o.note,
                )  # fmt: skip
            else:
                continue
            if _insert_execution(self._t, row):
                inserted.append((j.job_id, b.buffered_at, row.state))
        return inserted


class MemoryShardLeases(_Table):
    async def acquire(
        self,
        owner: str,
        limit: int,
        ttl_s: float,
        *,
        salt: int = 0,
        now: datetime | None = None,
        region: str | None = None,
        grace_s: float = 0.0,
        primary_region: str | None = None,
        never_owned: bool = True,
    ) -> list[HeldShard]:
        if limit <= 0:
            return []
        at = self._at(now)

        def free(lease: _Lease) -> bool:
            if lease.lease_until is None:
                return never_owned
            # A fellow standby's lease (a known region other than the primary) is free at once.
            other = lease.region is not None and primary_region is not None and lease.region != primary_region
            return lease.lease_until <= at - timedelta(seconds=0 if other else grace_s)

        chosen = sorted(
            (s for s, lease in self._t.leases.items() if free(lease)), key=lambda s: (s * 167 + salt % 256) % 256
        )[:limit]
        for s in chosen:
            lease = self._t.leases[s]
            lease.owner, lease.lease_until, lease.region = owner, at + _ms(ttl_s), region
            lease.revision += 1
        return [HeldShard(s, self._t.leases[s].revision) for s in chosen]

    async def renew(self, owner: str, ttl_s: float, now: datetime | None = None) -> list[HeldShard]:
        at = self._at(now)
        held = [
            s
            for s, lease in self._t.leases.items()
            if lease.owner == owner and lease.lease_until is not None and lease.lease_until > at
        ]
        for s in held:
            self._t.leases[s].lease_until = at + _ms(ttl_s)
        return [HeldShard(s, self._t.leases[s].revision) for s in held]

    async def list_all(self) -> list[ShardLease]:
        return [
            ShardLease(s, lease.owner, lease.lease_until, lease.revision, lease.region)
            for s, lease in sorted(self._t.leases.items())
        ]


class MemoryStore:
    """The tables of one transaction of the double."""

    def __init__(self, tables: Tables, now: datetime) -> None:
        self.jobs = MemoryJobs(tables, now)
        self.dispatch = MemoryDispatch(tables, now)
        self.shard_leases = MemoryShardLeases(tables, now)

    def __getattr__(self, name: str) -> Any:  # the tables it has not: each method raises
        return _Missing(name)


class MemoryDatabase:
    """Where ``app.store.Database`` stands, without a database."""

    dialect = "memory"

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.tables = Tables()
        self._lock = asyncio.Lock()

    def add_tenant(self, *, weight: int = 1, max_dispatch_per_s: int = 5000) -> UUID:
        """A tenant's row (what dispatch reads of it): the double has no tenants table of the seam's."""
        tenant_id = uuid.uuid4()
        self.tables.tenants[tenant_id] = _Tenant(tenant_id, weight, max_dispatch_per_s)
        return tenant_id

    async def transaction(
        self,
        work: Callable[[MemoryStore], Awaitable[T]],
        *,
        isolation: str | None = None,
        on_ambiguous: object = None,
        read_only: bool = False,
    ) -> T:
        async with self._lock:
            working = copy.deepcopy(self.tables)
            result = await work(MemoryStore(working, self.clock()))
            self.tables = working
            return result

    async def statement(self, work: Callable[[MemoryStore], Awaitable[T]]) -> T:
        return await self.transaction(work)

    async def close(self) -> None:
        pass


def _ms(seconds: float) -> timedelta:
    return timedelta(milliseconds=round(seconds * 1000))


def _plain(job: Job) -> Job:
    """The row as ``SELECT *`` or ``RETURNING *`` reads it: no execution-derived columns."""
    return msgspec.structs.replace(job, last_outcome=None, last_finished_at=None, has_open=False)


def _insert_execution(tables: Tables, row: _Execution) -> bool:
    """INSERT ... ON CONFLICT (job_id, scheduled_for) DO NOTHING; whether it was inserted."""
    if any(e.job_id == row.job_id and e.scheduled_for == row.scheduled_for for e in tables.executions.values()):
        return False
    tables.executions[row.execution_id] = row
    return True
