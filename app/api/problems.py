"""The one mapping from errors to RFC 9457 problem bodies (application/problem+json)."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from app import errors

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
    errors.TenantQuotaExceeded: (429, "quota-exceeded"),
    errors.DatabaseUnavailable: (503, "database-unavailable"),
    errors.TransactionRetriesExhausted: (503, "contention"),
    errors.StoreConflict: (409, "conflict"),
    errors.StoreRejected: (422, "invalid-input"),
}


def problem_body(status: int, slug: str, title: str, detail: str, instance: str, **extra: Any) -> dict[str, Any]:
    return {"type": f"https://kairos.dev/problems/{slug}", "title": title, "status": status,
            "detail": detail, "instance": instance, **extra}


def problem(status: int, slug: str, title: str, detail: str, instance: str, **extra: Any) -> Response[dict[str, Any]]:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(problem_body(status, slug, title, detail, instance, **extra), status_code=status,
                    media_type=PROBLEM, headers=headers)


def error_body(exc: errors.KairosError, instance: str) -> dict[str, Any]:
    """The problem object for a Kairos error (a whole response's body, or one batch item's error)."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            status, slug = _STATUS[cls]  # type: ignore[index]
            break
    else:
        status, slug = 500, "internal"
    extra = {"field": exc.field} if isinstance(exc, errors.InvalidInput) else {}
    title = (type(exc).__doc__ or "").strip().splitlines()[0]
    return problem_body(status, slug, title, exc.detail, instance, **extra)


def kairos_error(request: Request, exc: errors.KairosError) -> Response[dict[str, Any]]:
    body = error_body(exc, request.url.path)
    status = body["status"]
    if status >= 500:
        log.warning("request failed", extra={"path": request.url.path, "error": str(exc)})
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(body, status_code=status, media_type=PROBLEM, headers=headers)


def validation_error(request: Request, exc: ValidationException) -> Response[dict[str, Any]]:
    """msgspec decoding failures (wrong type, unknown field, malformed JSON): 400 naming the field."""
    field = None
    detail = exc.detail
    if isinstance(exc.extra, list) and exc.extra:
        first = exc.extra[0]
        if isinstance(first, dict):
            key = first.get("key")
            field = key.removeprefix("$.") if isinstance(key, str) else None
            detail = first.get("message", detail)
    extra = {"field": field} if field else {}
    return problem(400, "malformed-request", "The request could not be decoded.", str(detail),
                   request.url.path, **extra)


def http_error(request: Request, exc: HTTPException) -> Response[dict[str, Any]]:
    return problem(exc.status_code, "http-error", str(exc.detail), str(exc.detail), request.url.path)


def internal_error(request: Request, exc: Exception) -> Response[dict[str, Any]]:
    log.exception("unhandled error", extra={"path": request.url.path})
    return problem(500, "internal", "Internal error.", "The server failed to handle the request.",
                   request.url.path)


HANDLERS = {
    errors.KairosError: kairos_error,
    ValidationException: validation_error,
    HTTPException: http_error,
    Exception: internal_error,
}
