"""Job and execution states, written down once.

The schema's CHECK constraints and the guarded UPDATEs in ``sql/queries`` enforce the same
tables; ``tests/unit/test_sql_catalogue.py`` checks that every guarded UPDATE matches a transition here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class JobState(StrEnum):
    ACTIVE = "active"
    """Has a due_index row for its next occurrence. The API pauses or cancels it; the scheduler
    completes a one-off job when it dispatches its only occurrence."""
    PAUSED = "paused"
    """No due_index row. The API resumes it (next occurrence computed from now) or cancels it."""
    COMPLETED = "completed"
    """A one-off job whose occurrence was dispatched. Terminal (the API may still cancel it, which
    cancels its not-yet-started execution)."""
    CANCELLED = "cancelled"
    """Deleted by the tenant. Terminal."""


JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.ACTIVE: frozenset(
        {
            JobState.PAUSED,
            JobState.COMPLETED,
            JobState.CANCELLED,
            JobState.ACTIVE,  # the scheduler advances a cron job to its next occurrence
        }
    ),
    JobState.PAUSED: frozenset(
        {
            JobState.ACTIVE,
            JobState.CANCELLED,
            JobState.COMPLETED,  # resume of a one-off whose time passed while paused, with missed: skip
        }
    ),
    JobState.COMPLETED: frozenset(
        {
            JobState.CANCELLED,
            JobState.PAUSED,  # pause withdraws a one-off's execution dispatched ahead of its due time
        }
    ),
    JobState.CANCELLED: frozenset(),
}


ReportedJobState = Literal["active", "paused", "completed", "failed", "cancelled"]
REPORTED_JOB_STATES: tuple[ReportedJobState, ...] = ("active", "paused", "completed", "failed", "cancelled")


def reported_job_state(stored: JobState, has_open: bool, last_outcome: str | None) -> ReportedJobState:
    """What the API calls a job: a job whose schedule has ended stays active until its last
    execution is final, and reads failed when that execution was dead-lettered.

    The same rule is written in SQL in JobList (sql/queries/jobs.sql) so ?state= filters on it;
    tests/integration test both against each other."""
    if stored == JobState.COMPLETED:
        if has_open:
            return "active"
        if last_outcome == "dead":
            return "failed"
    return stored.value


class ExecutionState(StrEnum):
    READY = "ready"
    """Waiting in its pool's ready queue (ready_at may lie ahead: a retry's backoff or a circuit
    breaker's deferral). The executor leases it; the API cancels it."""
    LEASED = "leased"
    """A worker holds attempt N until lease_until. The worker completes or fails it; the reaper
    returns an expired lease to ready (or dead, when attempts are spent); a replace-overlap
    dispatch or the API cancels it."""
    SUCCEEDED = "succeeded"
    """Terminal."""
    DEAD = "dead"
    """Attempts exhausted or a non-retryable error: a dead letter. A replay makes it ready."""
    CANCELLED = "cancelled"
    """Terminal: cancelled by the tenant or replaced by a newer occurrence."""
    SKIPPED = "skipped"
    """Terminal: an occurrence that did not run (overlap, misfire, dst_gap), kept for history."""


EXECUTION_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    ExecutionState.READY: frozenset({ExecutionState.LEASED, ExecutionState.CANCELLED, ExecutionState.DEAD}),
    ExecutionState.LEASED: frozenset(
        {
            ExecutionState.SUCCEEDED,
            ExecutionState.READY,
            ExecutionState.DEAD,
            ExecutionState.CANCELLED,
            ExecutionState.LEASED,  # a heartbeat extends the lease of the same attempt
        }
    ),
    ExecutionState.SUCCEEDED: frozenset(),
    ExecutionState.DEAD: frozenset({ExecutionState.READY}),
    ExecutionState.CANCELLED: frozenset(),
    ExecutionState.SKIPPED: frozenset(),
}


class AttemptOutcome(StrEnum):
    RUNNING = "running"
    """The worker holds the lease; the attempt has no outcome yet."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """The worker (or the HTTP pool) reported an error: retried or dead-lettered by the execution."""
    EXPIRED = "expired"
    """The lease ran out before an outcome arrived (the reaper returned or dead-lettered it)."""
    CANCELLED = "cancelled"
    """The execution was cancelled or replaced while the attempt ran."""
    DISCARDED = "discarded"
    """A late outcome from an attempt that had lost its lease: kept for history, changed nothing."""
