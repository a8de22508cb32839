"""/v1/dead-letters and /v1/executions/{executionId}:replay: the controller.

Bodies are the Structs of app.api.dead_letters.schemas, decoded by Litestar (so /schema documents them); what
each route does is app.api.dead_letters.service, pagination is app.api.pagination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from litestar import Controller, Response, get, post
from litestar.openapi.spec import Operation, RequestBody
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from app import errors
from app.api.auth import DB, Tenant
from app.api.dead_letters import schemas, service
from app.api.injected import SettingsDep
from app.api.jobs.schemas import AttemptOut
from app.api.pagination import PageLimit, next_link

# Bulk replay budget per tenant, shared by every API replica: at most this many executions per window.
REPLAY_PER_WINDOW = 1000
REPLAY_WINDOW_S = 60.0


@dataclass
class OptionalBodyOperation(Operation):
    """Litestar marks every declared body required; these routes take none as all defaults."""

    def __post_init__(self) -> None:
        if isinstance(self.request_body, RequestBody):
            self.request_body.required = False


def _execution_ref(ref: str, *, action: str | None) -> UUID:
    """``{executionId}`` or ``{executionId}:{action}`` (custom method, as /v1/jobs does)."""
    ident, sep, verb = ref.partition(":")
    if action is not None and (not sep or verb != action):
        raise errors.InvalidInput("path", f"POST /v1/executions/{{executionId}}:<action> takes {action}")
    if action is None and sep:
        raise errors.ExecutionNotFound()
    try:
        return UUID(ident)
    except ValueError:
        raise errors.ExecutionNotFound() from None


class DeadLetterController(Controller):
    path = "/v1"
    tags = ["dead letters"]

    @get(
        "/dead-letters",
        operation_id="ListDeadLetters",
        summary="A tenant's dead executions with their last error, newest first; next page in the Link header.",
    )
    async def list_dead(
        self,
        db: DB,
        tenant: Tenant,
        cursor: FromQuery[str | None] = None,
        limit: PageLimit = None,
        job_id: Annotated[str | None, QueryParameter(name="jobId", schema_extra={"format": "uuid"})] = None,
    ) -> Response[list[schemas.DeadLetterOut]]:
        rows, nxt = await service.list_dead(db, tenant.tenant_id, job_id=job_id, cursor=cursor, limit=limit)
        headers = {"Link": next_link("/v1/dead-letters", nxt, limit=limit, jobId=job_id)} if nxt else None
        return Response([service.dead_letter_out(d) for d in rows], headers=headers)

    @post(
        "/dead-letters:replay",
        operation_id="ReplayDeadLetters",
        status_code=200,
        operation_class=OptionalBodyOperation,
        summary="Replay up to `limit` dead executions matching a filter (jobId, finished window); budgeted per tenant.",
    )
    async def replay_many(
        self, db: DB, tenant: Tenant, data: JSONBody[schemas.BulkReplayIn | None] = None
    ) -> schemas.BulkReplayedOut:
        return await service.replay_many(
            db, tenant.tenant_id, data or schemas.BulkReplayIn(), per_window=REPLAY_PER_WINDOW, window_s=REPLAY_WINDOW_S
        )

    @post(
        "/executions/{execution_ref:str}",
        operation_id="ReplayExecution",
        status_code=200,
        operation_class=OptionalBodyOperation,
        summary="POST /v1/executions/{executionId}:replay: make a dead execution ready again "
        "(fresh attempt budget; optional body {payload, retry})",
    )
    async def replay(
        self,
        execution_ref: FromPath[str],
        db: DB,
        tenant: Tenant,
        settings: SettingsDep,
        data: JSONBody[schemas.ReplayIn | None] = None,
    ) -> schemas.ReplayedOut:
        execution_id = _execution_ref(execution_ref, action="replay")
        done = await service.replay(
            db, tenant.tenant_id, execution_id, data or schemas.ReplayIn(), settings.max_payload_bytes
        )
        return service.replayed_out(done)

    @get(
        "/executions/{execution_ref:str}/attempts",
        operation_id="ListExecutionAttempts",
        summary="Every attempt of an execution, oldest first, including late results discarded after LEASE_LOST.",
    )
    async def attempts(self, execution_ref: FromPath[str], db: DB, tenant: Tenant) -> list[AttemptOut]:
        execution_id = _execution_ref(execution_ref, action=None)
        return [service.attempt_out(a) for a in await service.attempts(db, tenant.tenant_id, execution_id)]
