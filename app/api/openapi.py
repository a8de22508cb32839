"""The OpenAPI document as a client reads it, finished from what Litestar derives from the handlers.

Litestar routes whole path segments, so the custom methods (AIP-136) ``POST /v1/jobs/{jobId}:pause``,
``:resume``, ``:run``, ``:backfill`` and ``POST /v1/executions/{executionId}:replay`` are served by
one handler per path that reads the verb after the colon. The document shows them the way they
are called: one operation per action with its own typed body and answer. It also adds what
Litestar does not know: the bearer security scheme, the RFC 9457 problem responses each operation
can give, path parameters named and typed as ids, and an example on the job body.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi.spec import Components, OpenAPI, OpenAPIType, SecurityScheme

from app.api import schemas

PROBLEM_MEDIA = "application/problem+json"
PUBLIC = ("/healthz", "/readyz", "/metrics", "/demo/echo")

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object", "title": "Problem", "description": "RFC 9457 problem details.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri", "example": "https://kairos.dev/problems/invalid-input"},
        "title": {"type": "string", "example": "The request is invalid."},
        "status": {"type": "integer", "example": 422},
        "detail": {"type": "string", "example": "must be between 1 and 100"},
        "instance": {"type": "string", "example": "/v1/jobs"},
        "field": {"type": "string", "description": "JSON Pointer (body) or parameter name of the bad input",
                  "example": "/retry/maxAttempts"},
        "maxBytes": {"type": "integer", "description": "413 only: the route's body limit"},
        "quota": {"type": "string", "enum": ["maxActiveJobs", "maxSubmitPerSecond"],
                  "description": "429 of a submit quota only: which one (docs/quotas.md)"},
        "limit": {"type": "integer", "description": "429 of a submit quota only: the quota's value"},
        "retryAfterSeconds": {"type": "integer", "minimum": 1,
                              "description": "429 only: the Retry-After header's value, also on batch items"},
    },
}

STATUS_TEXT = {
    400: "The body is not JSON (or is missing).", 401: "No valid API key (send Authorization: Bearer <key>).",
    403: "The key does not cover this resource.", 404: "No such resource for this tenant.",
    409: "The resource is not in a state that allows this, or changed concurrently.",
    413: "The body is larger than the route allows (maxBytes).",
    422: "The JSON breaks the schema or a rule; field names it.",
    429: "A quota of the tenant is reached (quota names it), or this client address failed to authenticate too "
         "often; come back after Retry-After seconds.",
    503: "The database is unreachable or the transaction kept conflicting; retry.",
}

JOB_EXAMPLE = {
    "name": "nightly-report", "target": {"type": "http", "ref": "https://example.com/hooks/report"},
    "schedule": {"cron": "0 2 * * *", "tz": "Europe/London", "jitterSeconds": 300},
    "payload": {"report": "sales"}, "retry": {"maxAttempts": 5, "backoffSeconds": 10},
    "concurrency": "forbid", "misfire": "run_once", "labels": {"team": "finance"},
}

ID_PARAMS = {"job_ref": ("jobId", "The job's id."), "execution_ref": ("executionId", "The execution's id.")}


RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again.", "required": True,
                               "schema": {"type": "integer", "minimum": 1}}}


def _problems(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": STATUS_TEXT[s],
                     "content": {PROBLEM_MEDIA: {"schema": {"$ref": "#/components/schemas/Problem"}}},
                     **({"headers": RETRY_AFTER} if s == 429 else {})}
            for s in statuses}


def _json(ref: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


def _body(ref: str, required: bool) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


def _id_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": {"type": "string", "format": "uuid"}}


def _action(operation_id: str, summary: str, *, tag: str, param: tuple[str, str], body: str | None,
            body_required: bool, answer: str, status: int, problems: tuple[int, ...]) -> dict[str, Any]:
    op: dict[str, Any] = {"tags": [tag], "operationId": operation_id, "summary": summary,
                          "parameters": [_id_param(*param)],
                          "responses": {str(status): _json(answer), **_problems(*sorted({*problems, 429}))}}
    if body:
        op["requestBody"] = _body(body, body_required)
    return {"post": op}


JOB = ("jobId", "The job's id.")
ACTIONS: dict[str, dict[str, Any]] = {
    "/v1/jobs/{jobId}:pause": _action(
        "PauseJob", "Pause a job: no occurrence runs until it is resumed (one dispatched ahead is taken back).",
        tag="jobs", param=JOB, body=None, body_required=False, answer="JobOut", status=200,
        problems=(401, 404, 409, 503)),
    "/v1/jobs/{jobId}:resume": _action(
        "ResumeJob", "Resume a paused job; `missed` says what happens to the occurrences the pause missed "
        "(skip records them as skipped).", tag="jobs", param=JOB, body="ResumeIn", body_required=False,
        answer="JobOut", status=200, problems=(400, 401, 404, 409, 422, 503)),
    "/v1/jobs/{jobId}:run": _action(
        "RunJob", "Run a job once now, outside its schedule, under its overlap policy unless `overlap` says "
        "otherwise.", tag="jobs", param=JOB, body="RunIn", body_required=False, answer="RunOut", status=202,
        problems=(400, 401, 404, 409, 422, 503)),
    "/v1/jobs/{jobId}:backfill": _action(
        "BackfillJob", "Create the occurrences of a past range [from, to) once each, paced per tenant; "
        "1,000 per call (call again from nextFrom).", tag="jobs", param=JOB, body="BackfillIn",
        body_required=True, answer="BackfillOut", status=202, problems=(400, 401, 404, 409, 422, 503)),
    "/v1/executions/{executionId}:replay": _action(
        "ReplayExecution", "Make a dead execution ready again with a fresh attempt budget (optional payload "
        "and retry overrides).", tag="dead letters", param=("executionId", "The execution's id."),
        body="ReplayIn", body_required=False, answer="ReplayedOut", status=200,
        problems=(400, 401, 404, 409, 422, 503)),
}

# Problems per operation beyond 401/429/503 (which every /v1 operation can give: 429 when the client
# address failed to authenticate too often, app.api.auth).
PROBLEMS: dict[str, tuple[int, ...]] = {
    "CreateJob": (400, 403, 409, 413, 422, 429), "CreateJobs": (400, 413, 422), "ListJobs": (400, 422),
    "GetJob": (404,), "CancelJob": (404, 409), "UpdateJob": (400, 403, 404, 409, 422),
    "ListJobExecutions": (404, 422), "PreviewSchedule": (404, 422), "ListExecutionAttempts": (404,),
    "ListDeadLetters": (422,), "ReplayDeadLetters": (400, 422, 429),
    **{op: (400, 403, 404, 422) for op in ("GetStartLag", "GetOutcomes", "GetQueueDepths", "GetDueHistogram",
                                           "ListStatsTenants", "GetStatus")},
}

UPDATE_BODY = {"required": True, "description": "A JSON Merge Patch (RFC 7396) of the submit body: the fields to "
               "change; null removes a label or an optional field. Validated as a submit would be.",
               "content": {"application/merge-patch+json": {"schema": {"$ref": "#/components/schemas/JobIn"}},
                           "application/json": {"schema": {"$ref": "#/components/schemas/JobIn"}}}}


def document(app: Litestar) -> None:
    """Finish ``app``'s OpenAPI document in place (before it is first served)."""
    api: OpenAPI = app.openapi_schema
    components = api.components if api.components is not None else Components()
    api.components = components
    components.security_schemes = {"bearer": SecurityScheme(
        type="http", scheme="bearer", description="A tenant API key (`kairos tenants create`) or, for "
        "/v1/stats and /v1/status, the operator's KAIROS_ADMIN_TOKEN.")}
    api.security = [{"bearer": []}]
    _, extra = msgspec.json.schema_components(
        [schemas.ResumeIn, schemas.RunIn, schemas.RunOut, schemas.BackfillIn, schemas.BackfillOut, schemas.ReplayIn,
         schemas.ReplayedOut, schemas.JobOut], ref_template="#/components/schemas/{name}")
    known = dict(components.schemas or {})
    for name, schema in extra.items():
        known.setdefault(name, schema)
    known["Problem"] = PROBLEM_SCHEMA
    job_in = known.get("JobIn")
    if job_in is not None and hasattr(job_in, "examples"):
        job_in.examples = [JOB_EXAMPLE]
        job_in.description = ("A job: where to deliver (target), when (schedule: exactly one of runAt, "
                              "delaySeconds, cron with tz, or every), what (payload) and how to retry.")
    components.schemas = known
    _instants(known)
    paths = dict(api.paths or {})
    # The generic handlers behind the custom methods give way to one operation per action.
    item = paths.get("/v1/jobs/{job_ref}")
    if item is not None:
        item.post = None
    paths.pop("/v1/executions/{execution_ref}", None)
    renamed: dict[str, Any] = {}
    for path, path_item in paths.items():
        new = path
        for old, (name, _description) in ID_PARAMS.items():
            new = new.replace("{" + old + "}", "{" + name + "}")
        renamed[new] = path_item
        for op in _operations(path_item):
            _finish(op, public=path in PUBLIC or not path.startswith("/v1"))
    renamed.update(ACTIONS)
    api.paths = renamed


INSTANT_FIELDS = {"ScheduleIn": ("runAt", "startAt", "endAt")}


def _instants(known: dict[str, Any]) -> None:
    """Optional instants lose their date-time format in Litestar's oneOf [string, null]: put it back."""
    for name, fields in INSTANT_FIELDS.items():
        schema = known.get(name)
        for field in fields:
            prop = (getattr(schema, "properties", None) or {}).get(field)
            for branch in getattr(prop, "one_of", None) or ():
                if getattr(branch, "type", None) == OpenAPIType.STRING:
                    branch.format = "date-time"


def _operations(item: Any) -> list[Any]:
    return [op for op in (item.get, item.post, item.put, item.patch, item.delete) if op is not None]


def _finish(op: Any, *, public: bool) -> None:
    if public:
        op.security = []
        return
    for param in op.parameters or ():
        if getattr(param, "name", None) in ID_PARAMS:
            name, description = ID_PARAMS[param.name]
            param.name, param.description = name, description
            param.schema = {"type": "string", "format": "uuid"}
    if op.operation_id == "UpdateJob":
        op.request_body = UPDATE_BODY
    responses = dict(op.responses or {})
    responses.pop("400", None)  # Litestar's own validation body; ours is a problem
    for status, response in _problems(*sorted({401, 429, 503, *PROBLEMS.get(op.operation_id, ())})).items():
        responses.setdefault(status, response)
    op.responses = responses
