"""The bodies of /v1/dead-letters and /v1/executions (camelCase on the wire)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from app.api.wire import AwareDatetime, BackoffSeconds, MaxAttempts, Uuid, Wire


class RetryOverride(Wire):
    """Replay with a different retry policy; a field left out keeps the job's."""

    max_attempts: Annotated[
        MaxAttempts | None,
        msgspec.Meta(
            description=(
                "How many attempts the replay grants, counted from the replay: 3 means up to three more attempts, "
                "whatever the execution spent before (attempt numbers keep counting up). Left out: the job's "
                "maxAttempts."
            )
        ),
    ] = None
    backoff_seconds: BackoffSeconds | None = None
    max_backoff_seconds: BackoffSeconds | None = None


class ReplayIn(Wire):
    """Replay one dead execution; ``payload`` left out keeps the job's payload."""

    payload: Any = msgspec.UNSET
    retry: RetryOverride | None = None


# How many dead executions one bulk replay takes at most.
BULK_REPLAY_MAX = 1000


class BulkReplayIn(Wire):
    """Replay up to ``limit`` dead executions of a job or finished in a window (all optional)."""

    job_id: Uuid | None = None
    finished_after: AwareDatetime | None = None
    finished_before: AwareDatetime | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=BULK_REPLAY_MAX)] = 100


class DeadLetterOut(Wire):
    execution_id: str
    job_id: str
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    finished_at: datetime
    error: str | None


class ReplayedOut(Wire):
    execution_id: str
    job_id: str
    state: str
    attempt: Annotated[
        int, msgspec.Meta(description=("Attempts the execution made before the replay; the next one is attempt + 1."))
    ]
    max_attempts: Annotated[
        int,
        msgspec.Meta(
            description=(
                "Attempts the replay grants, counted from the replay: retry.maxAttempts of the request, or the "
                "job's maxAttempts."
            )
        ),
    ]
    ready_at: datetime
    last_attempt: Annotated[
        int,
        msgspec.Meta(
            description=(
                "The attempt number after which the execution is dead again if every attempt fails: "
                "attempt + maxAttempts."
            )
        ),
    ]


class BulkReplayedOut(Wire):
    replayed: int
    execution_ids: list[str]
    budget_left: int
    budget_resets_at: datetime
