"""The OpenAPI document as a client reads it, finished from what Litestar derives from the handlers.

Litestar routes whole path segments, so the custom methods (AIP-136) ``POST /v1/jobs/{jobId}:pause``,
``:resume``, ``:run``, ``:backfill`` and ``POST /v1/executions/{executionId}:replay`` are served by
one handler per path that reads the verb after the colon. The document shows them the way they
are called: one operation per action with its own typed body and answer. It also adds what
Litestar does not know: the bearer security scheme, the RFC 9457 problem responses each operation
can give, path parameters named and typed as ids, and an example on the job body.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi.spec import Components, OpenAPI, OpenAPIType, Schema, SecurityScheme

from app.api import wire
from app.api.dead_letters import schemas as dead_letter_schemas
from app.api.jobs import schemas
from app.api.jobs.controller import BATCH_MAX

PROBLEM_MEDIA = "application/problem+json"
PUBLIC = ("/healthz", "/readyz", "/metrics", "/demo/echo")

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Problem",
    "description": "RFC 9457 problem details.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri", "example": "https://kairos.dev/problems/invalid-input"},
        "title": {"type": "string", "example": "The request is invalid."},
        "status": {"type": "integer", "example": 422},
        "detail": {"type": "string", "example": "must be between 1 and 100"},
        "instance": {"type": "string", "example": "/v1/jobs"},
        "field": {
            "type": "string",
            "description": "JSON Pointer (body) or parameter name of the bad input",
            "example": "/retry/maxAttempts",
        },
        "maxBytes": {"type": "integer", "description": "413 only: the route's body limit"},
        "quota": {
            "type": "string",
            "enum": [
                "maxActiveJobs",
                "maxSubmitPerSecond",
                "maxManualRunsPerSecond",
                "maxManualInFlight",
                "bulkReplayPerWindow",
            ],
            "description": "429 of a tenant quota only: which one (docs/quotas.md)",
        },
        "limit": {"type": "integer", "description": "429 of a tenant quota only: the quota's value"},
        "retryAfterSeconds": {
            "type": "integer",
            "minimum": 1,
            "description": "429 only: the Retry-After header's value, also on batch items",
        },
    },
}

STATUS_TEXT = {
    400: "The body is not JSON (or is missing).",
    401: "No valid API key (send Authorization: Bearer <key>).",
    403: "The key does not cover this resource.",
    404: "No such resource for this tenant.",
    405: "The method is not one this path takes (Allow lists them): /v1/jobs/{jobId} with a colon in the id "
    "names a custom method, which only POST takes.",
    409: "The resource is not in a state that allows this, or changed concurrently.",
    413: "The body is larger than the route allows (maxBytes).",
    422: "The JSON breaks the schema or a rule; field names it.",
    429: "A quota of the tenant is reached (quota names it), or this client address failed to authenticate too "
    "often; come back after Retry-After seconds.",
    503: "The database is unreachable or the transaction kept conflicting; retry.",
}

JOB_EXAMPLE = {
    "name": "nightly-report",
    "target": {"type": "http", "ref": "https://example.com/hooks/report"},
    "schedule": {"cron": "0 2 * * *", "tz": "Europe/London", "jitterSeconds": 300},
    "payload": {"report": "sales"},
    "retry": {"maxAttempts": 5, "backoffSeconds": 10},
    "concurrency": "forbid",
    "misfire": "run_once",
    "labels": {"team": "finance"},
}

ID_PARAMS = {"job_ref": ("jobId", "The job's id."), "execution_ref": ("executionId", "The execution's id.")}


RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


def _problems(*statuses: int) -> dict[str, Any]:
    return {
        str(s): {
            "description": STATUS_TEXT[s],
            "content": {PROBLEM_MEDIA: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            **({"headers": RETRY_AFTER} if s == 429 else {}),
        }
        for s in statuses
    }


def _json(ref: str, description: str = "OK") -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


def _body(ref: str, required: bool) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


def _id_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "format": "uuid"},
    }


def _action(
    operation_id: str,
    summary: str,
    *,
    tag: str,
    param: tuple[str, str],
    body: str | None,
    body_required: bool,
    answer: str,
    status: int,
    problems: tuple[int, ...],
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "tags": [tag],
        "operationId": operation_id,
        "summary": summary,
        "parameters": [_id_param(*param)],
        "responses": {str(status): _json(answer), **_problems(*sorted({*problems, 429}))},
    }
    if body:
        op["requestBody"] = _body(body, body_required)
    return {"post": op}


JOB = ("jobId", "The job's id.")
ACTIONS: dict[str, dict[str, Any]] = {
    "/v1/jobs/{jobId}:pause": _action(
        "PauseJob",
        "Pause a job: no occurrence runs until it is resumed (one dispatched ahead is taken back).",
        tag="jobs",
        param=JOB,
        body=None,
        body_required=False,
        answer="JobOut",
        status=200,
        problems=(401, 404, 409, 503),
    ),
    "/v1/jobs/{jobId}:resume": _action(
        "ResumeJob",
        "Resume a paused job; `missed` says what happens to the occurrences the pause missed "
        "(skip records them as skipped).",
        tag="jobs",
        param=JOB,
        body="ResumeIn",
        body_required=False,
        answer="JobOut",
        status=200,
        problems=(400, 401, 404, 409, 422, 503),
    ),
    "/v1/jobs/{jobId}:run": _action(
        "RunJob",
        "Run a job once now, outside its schedule, under its overlap policy unless `overlap` says otherwise.",
        tag="jobs",
        param=JOB,
        body="RunIn",
        body_required=False,
        answer="RunOut",
        status=202,
        problems=(400, 401, 404, 409, 422, 503),
    ),
    "/v1/jobs/{jobId}:backfill": _action(
        "BackfillJob",
        "Create the occurrences of a past range [from, to) once each, paced per tenant; "
        "1,000 per call (call again from nextFrom).",
        tag="jobs",
        param=JOB,
        body="BackfillIn",
        body_required=True,
        answer="BackfillOut",
        status=202,
        problems=(400, 401, 404, 409, 422, 503),
    ),
    "/v1/executions/{executionId}:replay": _action(
        "ReplayExecution",
        "Make a dead execution ready again with a fresh attempt budget (optional payload and retry overrides).",
        tag="dead letters",
        param=("executionId", "The execution's id."),
        body="ReplayIn",
        body_required=False,
        answer="ReplayedOut",
        status=200,
        problems=(400, 401, 404, 409, 422, 503),
    ),
}

# Problems per operation beyond 401/429/503 (which every /v1 operation can give: 429 when the client
# address failed to authenticate too often, app.api.auth).
PROBLEMS: dict[str, tuple[int, ...]] = {
    "CreateJob": (400, 403, 409, 413, 422, 429),
    "CreateJobs": (400, 413, 422),
    "ListJobs": (400, 422),
    "GetJob": (404, 405),
    "CancelJob": (404, 405, 409),
    "UpdateJob": (400, 403, 404, 405, 409, 422),
    "ListJobExecutions": (404, 422),
    "PreviewSchedule": (404, 422),
    "ListExecutionAttempts": (404,),
    "ListDeadLetters": (422,),
    "ReplayDeadLetters": (400, 422, 429),
    **dict.fromkeys(
        ("GetStartLag", "GetOutcomes", "GetQueueDepths", "GetDueHistogram", "ListStatsTenants", "GetStatus"),
        (400, 403, 404, 422),
    ),
}

UPDATE_BODY = {
    "required": True,
    "description": "A JSON Merge Patch (RFC 7396) of the submit body: the fields to "
    "change; null removes a label or an optional field. Validated as a submit would be.",
    "content": {
        "application/merge-patch+json": {"schema": {"$ref": "#/components/schemas/JobIn"}},
        "application/json": {"schema": {"$ref": "#/components/schemas/JobIn"}},
    },
}


# -- the bounds the API enforces, written into the document ----------------------------------------------
# A body field's bounds are declared on its type in app.api.wire; Litestar's component schemas lose
# some of them (document-only keywords, the value branch of an optional field), so they are copied from
# the schemas msgspec writes for the same types. A query or header parameter's bounds are declared on
# the handler's parameter (``schema_extra``) and moved here onto its value's schema. The services check
# them and word the refusals. tests/security/test_schemathesis.py checks that data inside the bounds is
# accepted and data outside them refused.

# The keywords that bound a value (those copied from msgspec's schema of a field).
BOUNDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "additionalProperties",
    "enum",
    "format",
)


def wire_types() -> list[type[wire.Wire]]:
    """Every body type of the API (the subclasses of wire.Wire, nested ones included)."""
    found: list[type[wire.Wire]] = []
    todo = list(wire.Wire.__subclasses__())
    while todo:
        kind = todo.pop()
        if kind not in found:
            found.append(kind)
            todo.extend(kind.__subclasses__())
    return found


def _snake(key: str) -> str:
    return {"propertyNames": "property_names", "additionalProperties": "additional_properties"}.get(
        key, "".join("_" + c.lower() if c.isupper() else c for c in key)
    )


def _as_schema(rule: Any) -> Any:
    return Schema(**{_snake(k): _as_schema(v) for k, v in rule.items()}) if isinstance(rule, dict) else rule


def _constrain(target: Any, rules: dict[str, Any]) -> None:
    """Add ``rules`` (JSON Schema keywords) to ``target``: a Litestar Schema or a plain dict."""
    if isinstance(target, dict):
        target.update(rules)
        return
    for key, value in rules.items():
        setattr(target, _snake(key), _as_schema(value))


def _value_branch(prop: Any) -> Any:
    """The schema of a property's value: the non-null branch of an optional one."""
    branches = (
        (prop.get("anyOf") or prop.get("oneOf"))
        if isinstance(prop, dict)
        else (getattr(prop, "one_of", None) or getattr(prop, "any_of", None))
    )
    for branch in branches or ():
        kind = branch.get("type") if isinstance(branch, dict) else getattr(branch, "type", None)
        if kind not in ("null", OpenAPIType.NULL):
            return branch
    return prop


def _properties(schema: Any) -> dict[str, Any]:
    return (schema.get("properties") if isinstance(schema, dict) else schema.properties) or {}


def _keyword(schema: Any, key: str) -> Any:
    return schema.get(key) if isinstance(schema, dict) else getattr(schema, _snake(key), None)


def _bounds(known: dict[str, Any]) -> None:
    _, declared = msgspec.json.schema_components(wire_types(), ref_template="#/components/schemas/{name}")
    for name, schema in declared.items():
        ours = known.get(name)
        if ours is None or isinstance(ours, dict):  # absent, or msgspec's own already
            continue
        props = _properties(ours)
        for field, prop in _properties(schema).items():
            if field not in props:
                continue
            target = props[field]
            branch = _value_branch(target)
            # Litestar's enum of a Literal keeps its order (and null); msgspec's is sorted.
            rules = {
                k: v
                for k, v in _value_branch(prop).items()
                if k in BOUNDS and not (k == "enum" and _keyword(branch, k) is not None)
            }
            if rules:
                if branch is not target:  # Litestar puts an optional field's bounds beside oneOf
                    for key in rules:
                        setattr(target, _snake(key), None)
                _constrain(branch, rules)
    for name, schema in known.items():
        # Bodies are decoded with forbid_unknown_fields, answers carry their fields only. A problem is
        # open (RFC 9457 lets it grow members).
        if name != "Problem" and _properties(schema):
            _constrain(schema, {"additionalProperties": False})


def _parameter_bounds(op: Any) -> None:
    """An optional parameter is one left out, never one sent as ``null``: its schema is its value's. The
    bounds a handler declares for it (``schema_extra``, beside Litestar's oneOf) go onto that value, or
    onto each value of a repeated parameter (an array)."""
    for param in op.parameters or ():
        if getattr(param, "param_in", "path") == "path":
            continue
        outer = param.schema
        rules = {key: value for key in BOUNDS if (value := _keyword(outer, key)) is not None}
        param.schema = _value_branch(outer)
        if rules and param.schema is not outer:
            items = getattr(param.schema, "items", None)
            _constrain(items if items is not None else param.schema, rules)
        elif rules:
            items = getattr(param.schema, "items", None)
            if items is not None:
                for key in rules:
                    setattr(param.schema, _snake(key), None)
                _constrain(items, rules)


def _batch_body(known: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/jobs:batch's body: items are jobs plus their own idempotencyKey (BatchItemIn)."""
    item = copy.deepcopy(known["JobIn"])
    item.title, item.examples = "BatchItemIn", None
    item.description = "A job of a batch: the fields of a single submit plus its own Idempotency-Key."
    item.properties = {
        **item.properties,
        "idempotencyKey": Schema(type=OpenAPIType.STRING, min_length=1, max_length=255),
    }
    known["BatchItemIn"] = item
    # Any item is taken: one that is not a BatchItemIn gets its own problem in results (the batch is 200).
    each = {
        "description": "A BatchItemIn. Each item is validated on its own: one that is not valid gets a "
        "problem in its place in `results`, and the valid ones are stored.",
        "anyOf": [{"$ref": "#/components/schemas/BatchItemIn"}, {}],
    }
    body = {
        "type": "object",
        "required": ["jobs"],
        "additionalProperties": False,
        "properties": {"jobs": {"type": "array", "items": each, "maxItems": BATCH_MAX}},
    }
    return {"required": True, "content": {"application/json": {"schema": body}}}


_TARGET = {
    "type": "http (an URL) or queue (a worker pool)",
    "ref": "the URL of an http target; the pool of a queue target: NAME (the tenant's own) or shared/NAME",
    "method": "http only: POST (default), PUT, PATCH or GET",
    "headers": "http only: headers sent with each delivery (Kairos's own, such as Kairos-Signature, win)",
    "auth": 'http only: {"type": "oidc"} sends each delivery with Authorization: Bearer <JWT>, an '
    "identity token Kairos signs (keys at /.well-known/jwks.json); null: none",
}
_TARGET_AUTH = {
    "type": "oidc: a short-lived JWT (iss, aud, sub = tenants/<tenant>/jobs/<job>, iat, exp)",
    "audience": "the token's aud; absent: the target's URL",
}
_SCHEDULE = {
    "runAt": "one-off: the instant to run at (ISO 8601 with an offset)",
    "delaySeconds": "one-off: run this many seconds after the submit",
    "cron": "recurring: a 5-field cron expression (names, ranges, steps, H tokens); needs tz",
    "cronResolved": "the expression the scheduler evaluates: H tokens, names and shorthands resolved for this job",
    "every": "recurring: an interval such as 90s, 15m, 1h30m or 1d, anchored at startAt (or one interval after "
    "the submit): elapsed time, or with tz whole days at the anchor's wall-clock time in that zone",
    "anchorAt": "every only: the instant the interval's grid is anchored at",
    "tz": "the IANA zone a cron expression is evaluated in, e.g. Europe/London (required with cron); with every, "
    "whole days only (1d, 7d), the zone whose wall-clock time each occurrence keeps across DST",
    "jitterSeconds": "recurring: a window after each nominal time; the job runs at its own stable offset in it",
    "dst": "cron, or every with tz: what a spring-forward gap and a fall-back repeat do to a fire time",
    "startAt": "recurring: no occurrence before this instant",
    "endAt": "recurring: no occurrence after this instant; the job completes after its last one",
}
_RETRY = {
    "maxAttempts": "attempts before the execution is dead-lettered (first run included)",
    "backoffSeconds": "delay before the first retry, doubled each attempt (with jitter)",
    "maxBackoffSeconds": "the longest delay between two attempts",
    "maxRetryDurationSeconds": "no retry starts this long after the first attempt",
}
_JOB = {
    "name": "a name for people; not unique",
    "target": "where each occurrence is delivered",
    "schedule": "when: exactly one of runAt, delaySeconds, cron (with tz) or every",
    "payload": "JSON delivered with each occurrence (as the HTTP body, or to the worker)",
    "retry": "how failures are retried before dead-lettering",
    "timeoutSeconds": "how long one attempt may run",
    "concurrency": "when an occurrence falls due while the previous one still runs: allow, forbid (skip it), "
    "replace (cancel the running one) or buffer_one (it waits and starts when the running one settles; one more "
    "due meanwhile is skipped)",
    "bufferedAt": "concurrency buffer_one: the nominal time of the occurrence waiting for the running one; it starts "
    "within a second after that one settles (succeeds, is dead-lettered or cancelled)",
    "misfire": "occurrences missed while Kairos was down: run_once (default), catch_up (each, up to 100) or skip",
    "labels": "key/value pairs to filter by (GET /v1/jobs?label=key:value)",
    "dryRun": "occurrences are recorded as skipped, never delivered",
    "jobId": "the job's id",
    "state": "active, paused, completed, failed (its only execution dead) or cancelled",
    "nextRunAt": "when the next occurrence runs (jitter included); null when none is due",
    "pausedAt": "when the job was paused",
    "createdAt": "when the job was submitted",
    "updatedAt": "when the job row last changed (a dispatch included)",
    "version": "counts the tenant's changes; the job's ETag (If-Match on PATCH)",
    "lastOutcome": "the state of the newest finished execution: succeeded, dead, cancelled or skipped",
    "lastFinishedAt": "when the newest finished execution finished",
    "executions": "GET /v1/jobs/{jobId} only: how the job's executions ended so far, and how many are pending",
    "payloadRef": "where a large payload is kept (the payload field then holds it whole on GET of the job)",
}
FIELD_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "JobIn": _JOB,
    "JobOut": _JOB,
    "TargetIn": _TARGET,
    "TargetOut": _TARGET,
    "TargetAuth": _TARGET_AUTH,
    "ScheduleIn": _SCHEDULE,
    "ScheduleOut": _SCHEDULE,
    "RetryIn": _RETRY,
    "RetryOut": _RETRY,
    "DstIn": {
        "gap": "a fire time a spring-forward skips: shift (run at the first valid instant after it) or skip",
        "repeat": "a fixed-hour fire time a fall-back repeats: once (the first instance) or twice",
    },
    "ExecutionCounts": {
        "succeeded": "executions that succeeded",
        "dead": "executions dead-lettered",
        "cancelled": "executions cancelled",
        "skipped": "occurrences recorded as skipped",
        "pending": "executions still to run or running",
    },
    "BackfillIn": {
        "from": "first instant of the range (inclusive)",
        "to": "end of the range (exclusive, not in the future)",
        "overlap": "allow (default) or forbid: one backfilled occurrence per timeoutSeconds",
    },
    "BackfillOut": {
        "created": "occurrences created",
        "existing": "occurrences that already had an execution",
        "nextFrom": "set when the range held more than 1,000 occurrences: call again from here",
        "note": "why nothing was created when the range holds no occurrence",
    },
    "RunIn": {
        "overlap": "overrides the job's concurrency policy for this run (a buffer_one job's run starts at once, "
        "as with allow: a manual run never waits)"
    },
    "ResumeIn": {"missed": "occurrences missed while paused: skip (default) or run_once"},
}


def _describe_fields(known: dict[str, Any]) -> None:
    """Give each listed property of the component schemas its description (kept where one is set)."""
    for name, described in FIELD_DESCRIPTIONS.items():
        schema = known.get(name)
        # Litestar's own schemas are objects; those msgspec writes (the action bodies) are plain dicts.
        properties = schema.get("properties") if isinstance(schema, dict) else getattr(schema, "properties", None)
        for field, text in described.items():
            prop = (properties or {}).get(field)
            if isinstance(prop, dict):
                prop.setdefault("description", text)
            elif prop is not None and not getattr(prop, "description", None):
                prop.description = text


def document(app: Litestar) -> None:
    """Finish ``app``'s OpenAPI document in place (before it is first served)."""
    api: OpenAPI = app.openapi_schema
    components = api.components if api.components is not None else Components()
    api.components = components
    components.security_schemes = {
        "bearer": SecurityScheme(
            type="http",
            scheme="bearer",
            description="A tenant API key (`kairos tenants create`) or, for "
            "/v1/stats and /v1/status, the operator's KAIROS_ADMIN_TOKEN.",
        )
    }
    api.security = [{"bearer": []}]
    _, extra = msgspec.json.schema_components(
        [
            schemas.ResumeIn,
            schemas.RunIn,
            schemas.RunOut,
            schemas.BackfillIn,
            schemas.BackfillOut,
            dead_letter_schemas.ReplayIn,
            dead_letter_schemas.ReplayedOut,
            schemas.JobOut,
        ],
        ref_template="#/components/schemas/{name}",
    )
    known: dict[str, Any] = dict(components.schemas or {})
    for name, schema in extra.items():
        known.setdefault(name, schema)
    known["Problem"] = PROBLEM_SCHEMA
    job_in = known.get("JobIn")
    if job_in is not None and hasattr(job_in, "examples"):
        job_in.examples = [JOB_EXAMPLE]
        job_in.description = (
            "A job: where to deliver (target), when (schedule: exactly one of runAt, "
            "delaySeconds, cron with tz, or every), what (payload) and how to retry."
        )
    components.schemas = known
    _describe_fields(known)
    _bounds(known)
    batch = _batch_body(known)
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
            if op.operation_id == "CreateJobs":
                op.request_body = batch
    renamed.update(ACTIONS)
    api.paths = renamed


def _operations(item: Any) -> list[Any]:
    return [op for op in (item.get, item.post, item.put, item.patch, item.delete) if op is not None]


READY_UNAVAILABLE = {
    "description": "The database is unreachable or migrations are pending.",
    "content": {"application/json": {"schema": {"type": "object"}}},
}


def _finish(op: Any, *, public: bool) -> None:
    if public:
        op.security = []
        if op.operation_id == "Readyz":
            op.responses = {**(op.responses or {}), "503": READY_UNAVAILABLE}
        return
    for param in op.parameters or ():
        if getattr(param, "name", None) in ID_PARAMS:
            name, description = ID_PARAMS[param.name]
            param.name, param.description = name, description
            param.schema = {"type": "string", "format": "uuid"}
    _parameter_bounds(op)
    if op.operation_id == "UpdateJob":
        op.request_body = UPDATE_BODY
    responses = dict(op.responses or {})
    responses.pop("400", None)  # Litestar's own validation body; ours is a problem
    for status, response in _problems(*sorted({401, 429, 503, *PROBLEMS.get(op.operation_id, ())})).items():
        responses.setdefault(status, response)
    op.responses = responses
