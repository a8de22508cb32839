"""/v1/jobs and /v1/schedules."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, QueryParameter

from app import errors
from app.api import schemas, service
from app.api.auth import DB, Tenant

ACTIONS = ("pause", "resume")


def parse_job_ref(ref: str, *, action: bool) -> tuple[UUID, str | None]:
    """`{jobId}` or, for POST, `{jobId}:{action}` (Google AIP-136 custom methods)."""
    ident, sep, verb = ref.partition(":")
    try:
        job_id = UUID(ident)
    except ValueError:
        raise errors.JobNotFound() from None
    if action:
        if not sep or verb not in ACTIONS:
            raise errors.InvalidInput("path", f"POST /v1/jobs/{{jobId}}:<action> takes one of {', '.join(ACTIONS)}")
        return job_id, verb
    if sep:
        raise errors.JobNotFound()
    return job_id, None


class JobController(Controller):
    path = "/v1/jobs"
    tags = ["jobs"]

    @post("/", operation_id="CreateJob", status_code=201,
          summary="Submit a one-off or cron job; Idempotency-Key makes retries safe.")
    async def create_job(self, request: Request, data: JSONBody[schemas.JobIn], db: DB, tenant: Tenant,
                     state: State,
                     idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key")] = None,
                     ) -> Response[schemas.JobCreated]:
        raw = await request.body()
        created = await service.create_job(db, state.settings, tenant.tenant_id, data, raw, idempotency_key)
        body = schemas.JobCreated(job_id=str(created.job_id), next_run_at=created.next_run_at)
        return Response(body, status_code=201, headers={"Location": f"/v1/jobs/{created.job_id}"})

    @get("/", operation_id="ListJobs", summary="A tenant's jobs, newest first, filtered by state and name.")
    async def list_jobs(self, db: DB, tenant: Tenant, job_state: Annotated[str | None, QueryParameter(name="state")] = None,
                   name: FromQuery[str | None] = None, cursor: FromQuery[str | None] = None,
                   limit: FromQuery[int | None] = None) -> Response[schemas.JobPage]:
        rows, nxt = await service.list_jobs(db, tenant.tenant_id, state=job_state, name=name, cursor=cursor,
                                            limit=limit)
        page = schemas.JobPage(jobs=[service.job_out(j) for j in rows], next_cursor=nxt)
        headers = {"Link": service.next_link("/v1/jobs", nxt, state=job_state, name=name, limit=limit)} if nxt else None
        return Response(page, headers=headers)

    @get("/{job_ref:str}", operation_id="GetJob", summary="One job.")
    async def get_job(self, job_ref: FromPath[str], db: DB, tenant: Tenant) -> schemas.JobOut:
        job_id, _ = parse_job_ref(job_ref, action=False)
        return service.job_out(await service.get_job(db, tenant.tenant_id, job_id))

    @delete("/{job_ref:str}", operation_id="CancelJob", status_code=204,
            summary="Cancel a job: removes its next occurrence and cancels executions not yet started.")
    async def cancel_job(self, job_ref: FromPath[str], db: DB, tenant: Tenant) -> None:
        job_id, _ = parse_job_ref(job_ref, action=False)
        await service.cancel(db, tenant.tenant_id, job_id)

    @post("/{job_ref:str}", operation_id="PauseOrResumeJob", status_code=200,
          summary="POST /v1/jobs/{jobId}:pause or :resume (body {missed: skip|run_once}, default skip).")
    async def job_action(self, request: Request, job_ref: FromPath[str], db: DB, tenant: Tenant) -> schemas.JobOut:
        job_id, verb = parse_job_ref(job_ref, action=True)
        if verb == "pause":
            return service.job_out(await service.pause(db, tenant.tenant_id, job_id))
        body = schemas.decode_body(await request.body(), schemas.ResumeIn)
        return service.job_out(await service.resume(db, tenant.tenant_id, job_id, body.missed))

    @get("/{job_ref:str}/executions", operation_id="ListJobExecutions",
         summary="A job's executions, newest first; next page in the Link header.")
    async def job_executions(self, job_ref: FromPath[str], db: DB, tenant: Tenant, cursor: FromQuery[str | None] = None,
                         limit: FromQuery[int | None] = None) -> Response[list[schemas.ExecutionOut]]:
        job_id, _ = parse_job_ref(job_ref, action=False)
        rows, nxt = await service.executions(db, tenant.tenant_id, job_id, cursor, limit)
        headers = {"Link": service.next_link(f"/v1/jobs/{job_id}/executions", nxt, limit=limit)} if nxt else None
        return Response([service.execution_out(e) for e in rows], headers=headers)


class ScheduleController(Controller):
    path = "/v1/schedules"
    tags = ["schedules"]

    @get("/preview", operation_id="PreviewSchedule",
         summary="The next N fire times of a cron expression in a zone, with DST notes.")
    async def preview(self, tenant: Tenant, cron: FromQuery[str], tz: FromQuery[str], count: FromQuery[int] = 10,
                      from_: Annotated[str | None, QueryParameter(name="from")] = None,
                      job_id: Annotated[str | None, QueryParameter(name="jobId")] = None) -> schemas.PreviewOut:
        occurrences = service.preview(cron, tz, count, from_, job_id)
        return schemas.PreviewOut(fire_times=[
            schemas.FireTimeOut(utc=o.run_at, local=o.local.isoformat(), dst_note=o.dst_note, skipped=o.skipped)
            for o in occurrences
        ])
