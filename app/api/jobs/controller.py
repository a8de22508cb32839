"""/v1/jobs."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, QueryParameter

from app import errors
from app.api import bodies, pagination, wire
from app.api.auth import DB, Tenant
from app.api.injected import PayloadStoreDep, SettingsDep, SubmitterDep, SubmitWriterDep
from app.api.jobs import large_payloads, schemas, service, views
from app.api.wire import NO_NUL
from app.domain.states import REPORTED_JOB_STATES

BATCH_MAX = 1000
BATCH_MAX_BODY_BYTES = 16 * 1024 * 1024

ACTIONS = ("pause", "resume", "run", "backfill")


def etag(version: int) -> str:
    """A job's version as its entity tag (strong: the version names one definition of the job)."""
    return f'"{version}"'


def if_match_versions(header: str | None) -> frozenset[int] | None:
    """The versions an If-Match header names (RFC 9110 13.1.1); None for no header or ``*``. Weak tags never
    match (strong comparison); a bare number is taken as the tag of that version."""
    if header is None or header.strip() == "*":
        return None
    versions: set[int] = set()
    for part in header.split(","):
        tag = part.strip()
        if tag.startswith("W/"):
            continue
        quoted = len(tag) >= 2 and tag[0] == tag[-1] == '"'
        digits = tag.strip('"')  # the document's pattern lets either quote go missing: read the number
        if digits.isdigit() and len(digits) <= 18:
            versions.add(int(digits))
        elif not quoted:  # a quoted tag that names no version matches nothing; anything else is no tag
            raise errors.InvalidInput("If-Match", 'the job\'s ETag, e.g. If-Match: "3"')
    return frozenset(versions)


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

    @post(
        "/",
        operation_id="CreateJob",
        status_code=201,
        summary="Submit a one-off or cron job; Idempotency-Key makes retries safe.",
    )
    async def create_job(
        self,
        data: JSONBody[schemas.JobIn],
        tenant: Tenant,
        idempotency_key: Annotated[
            str | None,
            HeaderParameter(
                name="Idempotency-Key", schema_extra={"min_length": 1, "max_length": wire.IDEMPOTENCY_KEY_MAX}
            ),
        ] = None,
    ) -> Response[schemas.JobCreated]:
        """The route's declaration, for the OpenAPI document and the path's methods. Its requests are answered
        in front of the router, by ``app.api.jobs.create_route.CreateJobRoute`` (``create_app`` installs it),
        and never reach this handler."""
        raise RuntimeError("POST /v1/jobs is answered by app.api.jobs.create_route.CreateJobRoute")

    @get(
        "/",
        operation_id="ListJobs",
        summary="A tenant's jobs, newest first, filtered by state, name, name prefix and labels.",
    )
    async def list_jobs(
        self,
        db: DB,
        tenant: Tenant,
        job_state: Annotated[
            str | None,
            QueryParameter(
                name="state",
                description="active, paused, completed, failed or cancelled",
                schema_extra={"enum": list(REPORTED_JOB_STATES)},
            ),
        ] = None,
        name: Annotated[str | None, QueryParameter(schema_extra={"pattern": NO_NUL})] = None,
        name_prefix: Annotated[str | None, QueryParameter(name="namePrefix", schema_extra={"pattern": NO_NUL})] = None,
        label: Annotated[
            list[str] | None,
            QueryParameter(
                schema_extra={"min_length": 1, "pattern": NO_NUL},
                name="label",
                description="a label selector: key:value (or key=value), key!=value, "
                "'key in (a,b)', 'key notin (a,b)', key (has it), !key "
                "(has not); comma-separated or repeated, all must hold",
            ),
        ] = None,
        cursor: FromQuery[str | None] = None,
        limit: pagination.PageLimit = None,
    ) -> Response[schemas.JobPage]:
        rows, nxt = await service.list_jobs(
            db,
            tenant.tenant_id,
            state=job_state,
            name=name,
            cursor=cursor,
            limit=limit,
            name_prefix=name_prefix,
            labels=label,
        )
        page = schemas.JobPage(jobs=[views.job_out(j) for j in rows], next_cursor=nxt)
        headers = (
            {
                "Link": pagination.next_link(
                    "/v1/jobs", nxt, state=job_state, name=name, namePrefix=name_prefix, label=label, limit=limit
                )
            }
            if nxt
            else None
        )
        return Response(page, headers=headers)

    @get(
        "/{job_ref:str}",
        operation_id="GetJob",
        summary="One job, with how its executions stand; ETag is its version (for If-Match on PATCH).",
    )
    async def get_job(
        self, job_ref: FromPath[str], db: DB, tenant: Tenant, payload_store: PayloadStoreDep
    ) -> Response[schemas.JobOut]:
        job_id, _ = parse_job_ref(job_ref, action=False)
        job, counts = await service.get_job_with_counts(db, tenant.tenant_id, job_id)
        out = views.job_out(await large_payloads.whole(payload_store, job), counts)
        return Response(out, headers={"ETag": etag(job.version)})

    @delete(
        "/{job_ref:str}",
        operation_id="CancelJob",
        status_code=204,
        summary="Cancel a job: removes its next occurrence and cancels executions not yet started.",
    )
    async def cancel_job(self, job_ref: FromPath[str], db: DB, tenant: Tenant) -> None:
        job_id, _ = parse_job_ref(job_ref, action=False)
        await service.cancel(db, tenant.tenant_id, job_id)

    @patch(
        "/{job_ref:str}",
        operation_id="UpdateJob",
        status_code=200,
        summary="Change a job (JSON Merge Patch of the submit body); the next occurrence follows the new "
        'schedule. If-Match: the ETag of GET ("<version>"); another version is 412.',
    )
    async def update_job(
        self,
        request: Request[Any, Any, Any],
        job_ref: FromPath[str],
        db: DB,
        tenant: Tenant,
        settings: SettingsDep,
        payload_store: PayloadStoreDep,
        if_match: Annotated[
            str | None,
            HeaderParameter(
                name="If-Match",
                schema_extra={"pattern": '^(W/)?"?[0-9]{1,18}"?$'},
                description="the job's ETag (its version, quoted); a job at another "
                "version answers 412 and is not changed",
            ),
        ] = None,
    ) -> Response[schemas.JobOut]:
        job_id, _ = parse_job_ref(job_ref, action=False)
        raw = await request.body()
        # A merge patch: any JSON, checked once merged (shaped like a job when naming what nests too deeply).
        body = bodies.decode(raw, Any, shape=schemas.JobIn) if raw.strip() else None
        versions = if_match_versions(if_match)
        job = await service.update(db, settings, tenant.tenant_id, job_id, body, versions, payload_store)
        out = views.job_out(await large_payloads.whole(payload_store, job))
        return Response(out, headers={"ETag": etag(job.version)})

    @post(
        "/{job_ref:str}",
        operation_id="JobAction",
        status_code=200,
        summary="POST /v1/jobs/{jobId}:pause | :resume {missed} | :run {overlap} | :backfill {from, to, overlap}.",
    )
    async def job_action(
        self,
        request: Request[Any, Any, Any],
        job_ref: FromPath[str],
        db: DB,
        tenant: Tenant,
        settings: SettingsDep,
        submit_writer: SubmitWriterDep,
    ) -> Response[Any]:
        job_id, verb = parse_job_ref(job_ref, action=True)
        raw = await request.body()
        if verb == "pause":
            return Response(views.job_out(await service.pause(db, tenant.tenant_id, job_id)))
        if verb == "resume":
            body = wire.decode_body(raw, schemas.ResumeIn)
            return Response(views.job_out(await service.resume(db, tenant.tenant_id, job_id, body.missed)))
        manual = submit_writer.manual
        if verb == "run":
            run = wire.decode_body(raw, schemas.RunIn)
            await manual.admit(tenant.tenant_id, 1)
            try:
                job, execution_id = await service.run_now(db, tenant.tenant_id, job_id, run.overlap)
            except BaseException:
                manual.unused(tenant.tenant_id, 1)
                raise
            out = schemas.RunOut(execution_id=str(execution_id), job=views.job_out(job))
            return Response(out, status_code=202, headers={"Location": f"/v1/jobs/{job_id}/executions"})
        if not raw.strip():
            raise errors.MalformedBody("", 'is empty; :backfill needs {"from": ..., "to": ...}')
        fill = wire.decode_body(raw, schemas.BackfillIn)
        # At most what the tenant's manual-run quotas admit now; nextFrom says where to go on.
        admitted = await manual.admit(tenant.tenant_id, service.MAX_BACKFILL)
        created = 0
        try:
            created, existing, nxt, note = await service.backfill(
                db, settings, tenant.tenant_id, job_id, fill.from_, fill.to, fill.overlap, limit=admitted
            )
        finally:
            manual.unused(tenant.tenant_id, admitted - created)
        return Response(
            schemas.BackfillOut(created=created, existing=existing, next_from=nxt, note=note), status_code=202
        )

    @get(
        "/{job_ref:str}/executions",
        operation_id="ListJobExecutions",
        summary="A job's executions, newest first; next page in the Link header.",
    )
    async def job_executions(
        self,
        job_ref: FromPath[str],
        db: DB,
        tenant: Tenant,
        cursor: FromQuery[str | None] = None,
        limit: pagination.PageLimit = None,
    ) -> Response[list[schemas.ExecutionOut]]:
        job_id, _ = parse_job_ref(job_ref, action=False)
        job, rows, attempts, nxt = await service.executions(db, tenant.tenant_id, job_id, cursor, limit)
        headers = {"Link": pagination.next_link(f"/v1/jobs/{job_id}/executions", nxt, limit=limit)} if nxt else None
        return Response([views.execution_out(job, e, attempts.get(e.execution_id)) for e in rows], headers=headers)


@post(
    "/v1/jobs:batch",
    operation_id="CreateJobs",
    status_code=200,
    tags=["jobs"],
    request_max_body_size=BATCH_MAX_BODY_BYTES,
    summary="Submit up to 1,000 jobs; each item is validated on its own and the valid ones commit together.",
)
async def create_jobs(request: Request[Any, Any, Any], tenant: Tenant, submitter: SubmitterDep) -> schemas.BatchOut:
    """Body ``{"jobs": [JobIn + optional idempotencyKey, ...]}``; results in request order."""
    batch: schemas.BatchIn = bodies.decode(await request.body(), schemas.BatchIn, shape=schemas.BatchShape)
    if len(batch.jobs) > BATCH_MAX:
        raise errors.InvalidInput("jobs", f"at most {BATCH_MAX} jobs per batch, got {len(batch.jobs)}")
    return await submitter.create_batch(tenant.tenant_id, batch, request.headers.get("traceparent"))
