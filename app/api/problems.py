"""The one mapping from errors to RFC 9457 problem bodies (application/problem+json).

An invalid request's problem names what is wrong in ``field``, in one form per place:

* in the body, a JSON Pointer (RFC 6901) into it: ``/schedule/delaySeconds``, ``/target/type``,
  ``""`` for the whole body, and for an item of POST /v1/jobs:batch the pointer from the batch's
  root, ``/jobs/3/name``. The domain names fields with dotted paths (``retry.maxAttempts``); they
  become pointers here, in :func:`field_of`, and nowhere else.
* a query, path or header parameter, its name as sent: ``count``, ``cursor``, ``Idempotency-Key``.

A body that is not JSON is 400 and has no field; JSON that breaks the schema is 422
(app.api.bodies decodes every body and phrases its failures).
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from app import errors
from app.api import bodies, guards

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"

_STATUS: dict[type[errors.KairosError], tuple[int, str]] = {
    errors.MalformedBody: (400, "malformed-request"),
    errors.InvalidInput: (422, "invalid-input"),
    errors.Unauthorized: (401, "unauthorized"),
    errors.Forbidden: (403, "forbidden"),
    errors.JobNotFound: (404, "not-found"),
    errors.ExecutionNotFound: (404, "not-found"),
    errors.TenantNotFound: (404, "not-found"),
    errors.IdempotencyConflict: (409, "idempotency-conflict"),
    errors.InvalidStateTransition: (409, "invalid-state"),
    errors.PreconditionFailed: (412, "precondition-failed"),
    errors.TenantQuotaExceeded: (429, "quota-exceeded"),
    errors.AuthenticationThrottled: (429, "too-many-auth-failures"),
    errors.DatabaseUnavailable: (503, "database-unavailable"),
    errors.ObjectStoreUnavailable: (503, "object-store-unavailable"),
    errors.TransactionRetriesExhausted: (503, "contention"),
    errors.StoreConflict: (409, "conflict"),
    errors.StoreRejected: (422, "invalid-input"),
}


def problem_body(status: int, slug: str, title: str, detail: str, instance: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": f"https://kairos.dev/problems/{slug}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        **extra,
    }


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    instance: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response[dict[str, Any]]:
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    return Response(
        problem_body(status, slug, title, detail, instance, **extra),
        status_code=status,
        media_type=PROBLEM,
        headers=headers,
    )


def field_of(exc: errors.InvalidInput, *, within: str = "", parameters: frozenset[str] = frozenset()) -> str | None:
    """The problem's ``field`` for an invalid request (None: a body that is not JSON has none).

    ``within`` is the pointer of the part of the body the error is about (a batch item), and
    ``parameters`` the names of the parameters the request carries, in lower case: a service that
    checks one raises InvalidInput naming it, which is not a body path.
    """
    if isinstance(exc, errors.MalformedBody):
        return None
    if isinstance(exc, errors.InvalidParameter) or (not within and exc.field.lower() in parameters):
        return exc.field
    if exc.field.startswith("/") or exc.field in ("", "body"):  # "body": older code's name for the whole body
        return within + ("" if exc.field == "body" else exc.field)
    return within + bodies.pointer_of_path(exc.field)


def error_body(
    exc: errors.KairosError, instance: str, *, within: str = "", parameters: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The problem object for a Kairos error (a whole response's body, or one batch item's error:
    ``within`` is then the item's pointer, ``/jobs/3``)."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            status, slug = _STATUS[cls]
            break
    else:
        status, slug = 500, "internal"
    field = field_of(exc, within=within, parameters=parameters) if isinstance(exc, errors.InvalidInput) else None
    extra: dict[str, Any] = {"field": field} if field is not None else {}
    if isinstance(exc, errors.TenantQuotaExceeded) and exc.quota is not None:
        extra.update(quota=exc.quota, limit=exc.limit)
    if (retry_after := getattr(exc, "retry_after_s", None)) is not None:
        extra["retryAfterSeconds"] = retry_after
    title = (type(exc).__doc__ or "").strip().splitlines()[0]
    return problem_body(status, slug, title, exc.detail, instance, **extra)


def _parameters(request: Request[Any, Any, Any]) -> frozenset[str]:
    """The names of the parameters a request carries: query, headers, and its path."""
    return frozenset({"path", *(k.lower() for k in request.query_params), *request.headers.keys()})


def error_answer(
    exc: errors.KairosError,
    path: str,
    parameters: frozenset[str],
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The problem body and the headers that answer a Kairos error on ``path`` (logged when a 5xx)."""
    body = error_body(exc, path, parameters=parameters)
    if body["status"] >= 500:
        log.warning("request failed", extra={"path": path, "error": str(exc)})
    headers = {"WWW-Authenticate": "Bearer"} if body["status"] == 401 else None
    if "retryAfterSeconds" in body:  # a 429: when to come back (RFC 9110 section 10.2.3)
        headers = {"Retry-After": str(body["retryAfterSeconds"])}
    return body, headers


def kairos_error(request: Request[Any, Any, Any], exc: errors.KairosError) -> Response[dict[str, Any]]:
    body, headers = error_answer(exc, request.url.path, _parameters(request))
    return Response(body, status_code=body["status"], media_type=PROBLEM, headers=headers)


def validation_error(request: Request[Any, Any, Any], exc: ValidationException) -> Response[dict[str, Any]]:
    """Litestar's own validation (parameters, and any body it decoded itself): our InvalidInput."""
    return kairos_error(request, bodies.from_validation_exception(exc))


def http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    if exc.status_code == 405:
        # Raised by routing (the route's methods) or by app.api.guards (already the path's own).
        given = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow") or ""
        allow = ", ".join(
            guards.allowed_methods(
                request.url.path,
                [m.strip() for m in given.split(",") if m.strip()],
                action_route=guards.is_action_path(request.url.path),
            )
        )
        return problem(
            405,
            "method-not-allowed",
            "The method is not allowed on this resource.",
            f"{request.method} is not one of {allow}",
            request.url.path,
            headers={"Allow": allow},
        )
    if exc.status_code == 413:
        try:
            limit = request.route_handler.resolve_request_max_body_size()
        except AttributeError:
            limit = None
        if limit:
            return Response(too_large_body(limit, request.url.path), status_code=413, media_type=PROBLEM)
    return problem(exc.status_code, "http-error", str(exc.detail), str(exc.detail), request.url.path)


def too_large_body(limit: int, path: str) -> dict[str, Any]:
    """The 413 problem for a body over the route's limit of ``limit`` bytes."""
    return problem_body(
        413,
        "body-too-large",
        "The request body is too large.",
        f"the body is larger than this route's limit of {limit} bytes",
        path,
        maxBytes=limit,
    )


def internal_body(path: str) -> dict[str, Any]:
    """The 500 problem for an unhandled error on ``path``, logged with its traceback (call it while handling)."""
    log.exception("unhandled error", extra={"path": path})  # noqa: LOG004 - called from except blocks
    return problem_body(500, "internal", "Internal error.", "The server failed to handle the request.", path)


def internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    return Response(internal_body(request.url.path), status_code=500, media_type=PROBLEM)


HANDLERS = {
    errors.KairosError: kairos_error,
    ValidationException: validation_error,
    HTTPException: http_error,
    Exception: internal_error,
}
