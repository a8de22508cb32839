"""``POST /v1/jobs``: the single submit, answered in front of Litestar's router.

The single submit is the API's hottest route: a herd is submitted one job per request. Through
Litestar's router each such request costs about as much CPU again in routing, dependency resolution,
signature parsing and response building as in the submit itself (docs/performance.md, "Submit"), so
this route is a plain ASGI handler that ``create_app`` puts in front of the Litestar application's
router. It answers every ``POST /v1/jobs``; Litestar keeps the route's declaration
(``JobController.create_job``), which the OpenAPI document and the ``Allow`` header are read from.

Each step is the one the Litestar routes take, called rather than restated: the key is checked first
(``auth.authenticate``: 401, 403 or 429 before the body is looked at), the query by ``guards.refuse_nul``,
the body's size against the app's limit (``problems.too_large_body``), its JSON by ``bodies.decode``,
the submit by ``JobSubmitter.create`` (shared with the batch route), and a refusal is rendered by
``problems.error_answer``. The request's log line and duration (``app.api.telemetry``) read the route
template and the tenant from the scope, as for any route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from app import errors
from app.api import bodies, guards, problems
from app.api.auth import AuthThrottle, authenticate
from app.api.jobs import schemas
from app.api.jobs.service import JobSubmitter
from app.api.telemetry import TENANT_STATE_KEY
from app.store import Database, tenants

PATH = "/v1/jobs"
_PATHS = frozenset({PATH, PATH + "/"})
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

# The request headers the route reads; a repeated one counts by its first value.
_READ = frozenset({b"authorization", b"idempotency-key", b"traceparent", b"content-length"})
_JSON = [(b"content-type", b"application/json")]
_PROBLEM = [(b"content-type", problems.PROBLEM.encode())]


class _TooLarge(Exception):
    """The body is over the limit."""


class _Disconnected(Exception):
    """The client went away before its body was read."""


class CreateJobRoute:
    """ASGI: ``POST /v1/jobs`` answered here (module docstring); every other request goes on to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        db: Database,
        *,
        key_cache: tenants.KeyCache,
        throttle: AuthThrottle,
        submitter: JobSubmitter,
        max_body_bytes: int,
    ) -> None:
        self.app = app
        self.db = db
        self.keys = key_cache
        self.throttle = throttle
        self.submitter = submitter
        self.max_body_bytes = max_body_bytes
        self._encode = msgspec.json.Encoder().encode

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in _PATHS:
            await self.app(scope, receive, send)
            return
        scope["path_template"] = PATH  # the route's, for the request's log line (app.api.telemetry)
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in _READ:
                headers.setdefault(name, value)
        try:
            created = await self._create(scope, receive, headers)
        except errors.KairosError as exc:
            await self._problem(send, scope, exc)
        except _TooLarge:
            await _answer(
                send, 413, _PROBLEM, self._encode(problems.too_large_body(self.max_body_bytes, scope["path"]))
            )
        except _Disconnected:
            return  # nobody to answer
        except Exception:  # noqa: BLE001 - an unexpected failure answers 500 with its traceback logged
            await _answer(send, 500, _PROBLEM, self._encode(problems.internal_body(scope["path"])))
        else:
            location = f"{PATH}/{created.job_id}".encode()
            await _answer(send, 201, [(b"location", location), *_JSON], self._encode(created))

    async def _create(self, scope: dict[str, Any], receive: Receive, headers: dict[bytes, bytes]) -> schemas.JobCreated:
        client = scope.get("client")
        tenant = await authenticate(
            self.throttle, self.keys, self.db, client[0] if client else "", _text(headers.get(b"authorization")) or ""
        )
        scope.setdefault("state", {})[TENANT_STATE_KEY] = tenant.tenant_id  # for the request's log line
        if scope["query_string"]:
            guards.refuse_nul(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise _TooLarge
        raw = await _body(receive, self.max_body_bytes)
        job: schemas.JobIn = bodies.decode(raw, schemas.JobIn)
        return await self.submitter.create(
            tenant.tenant_id, job, raw, _text(headers.get(b"idempotency-key")), _text(headers.get(b"traceparent"))
        )

    async def _problem(self, send: Send, scope: dict[str, Any], exc: errors.KairosError) -> None:
        parameters = {"path", *(name.decode("latin-1").lower() for name, _ in scope["headers"])}
        if scope["query_string"]:
            parameters.update(name.lower() for name, _ in parse_qsl(scope["query_string"].decode("latin-1")))
        body, headers = problems.error_answer(exc, scope["path"], frozenset(parameters))
        extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await _answer(send, body["status"], [*extra, *_PROBLEM], self._encode(body))


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


async def _body(receive: Receive, limit: int) -> bytes:
    """The whole request body; _TooLarge past ``limit``, _Disconnected if the client leaves first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
