"""``POST /v1/jobs`` without Litestar's per-request machinery, for the requests it can answer alone.

The single submit is the API's hottest route: a herd is submitted one job per request. Through
Litestar each such request costs about as much CPU again in routing, dependency resolution,
signature parsing and response building as in the submit itself (539 against 237 us a request in
one process; docs/performance.md, "Submit"). :class:`FastCreateJob` sits in front of the Litestar
app and answers the ordinary request itself: it authenticates with ``auth``'s key cache and throttle,
decodes with ``bodies.decode``, and submits through the route's own implementation
(``JobSubmitter.create``), so the two answer byte for byte alike.

Anything out of the ordinary goes to Litestar untouched, its body replayed: another path or
method, a query string, a repeated credential header, a throttled client, a missing, unknown or
revoked key, a body over the limit, one that does not decode or validate, a payload for the
object store. Each of these is refused or handled before anything is written, so Litestar's
answer is the one a client gets. Once the writer has the job, this module answers whatever comes
back: the job created (201) or the Kairos error (its problem body, as ``problems`` renders it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from uuid import UUID

import msgspec

from app import errors
from app.api import bodies, problems
from app.api.auth import AuthThrottle
from app.api.jobs import schemas
from app.api.jobs.service import JobSubmitter
from app.api.telemetry import TENANT_STATE_KEY
from app.store import Database, tenants

PATH = "/v1/jobs"
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

# The request headers the route reads; any of them twice and Litestar decides which counts.
_READ = frozenset({b"authorization", b"idempotency-key", b"traceparent", b"content-length"})
_JSON = [(b"content-type", b"application/json")]
_PROBLEM = [(b"content-type", problems.PROBLEM.encode())]


class _Fallback(Exception):
    """This request is Litestar's to answer."""


class _Accepted(NamedTuple):
    tenant_id: UUID
    job: schemas.JobIn
    headers: dict[bytes, bytes]  # those in _READ
    raw: bytes


class FastCreateJob:
    """ASGI middleware: ``POST /v1/jobs`` answered here when it can be (module docstring), else ``app``."""

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
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH or scope["query_string"]:
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        try:
            accepted = await self._accept(scope, receive, read)
        except _Fallback:
            await self.app(scope, _replay(read, receive), send)
            return
        await self._submit(scope, send, accepted)

    async def _accept(self, scope: dict[str, Any], receive: Receive, read: list[Message]) -> _Accepted:
        """The request, authenticated and decoded; _Fallback when Litestar must answer it. ``read``
        collects the messages taken from ``receive``."""
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in _READ:
                if name in headers:
                    raise _Fallback
                headers[name] = value
        client = scope.get("client")
        if self.throttle.wait_s(client[0] if client else "") > 0:
            raise _Fallback
        scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise _Fallback
        try:
            principal = await self.keys.resolve(self.db, key)
        except Exception:  # noqa: BLE001 - any failure here is Litestar's route to answer, as it would
            raise _Fallback from None
        if principal is None or principal.tenant_id is None:
            raise _Fallback
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            raise _Fallback
        raw = await _body(receive, read, self.max_body_bytes)
        try:
            job: schemas.JobIn = bodies.decode(raw, schemas.JobIn)
        except errors.KairosError:
            raise _Fallback from None
        return _Accepted(principal.tenant_id, job, headers, raw)

    async def _submit(self, scope: dict[str, Any], send: Send, accepted: _Accepted) -> None:
        tenant_id, job, headers, raw = accepted
        scope.setdefault("state", {})[TENANT_STATE_KEY] = tenant_id  # for the request's log line
        scope["path_template"] = PATH  # the route's, for the request's log line (app.api.telemetry)
        idempotency_key = headers[b"idempotency-key"].decode("latin-1") if b"idempotency-key" in headers else None
        traceparent = headers[b"traceparent"].decode("latin-1") if b"traceparent" in headers else None
        try:
            created = await self.submitter.create(tenant_id, job, raw, idempotency_key, traceparent)
        except errors.KairosError as exc:
            await self._problem(send, scope, exc)
            return
        except Exception:  # noqa: BLE001 - an unexpected failure answers 500 with its traceback logged
            await _answer(send, 500, _PROBLEM, self._encode(problems.internal_body(PATH)))
            return
        await _answer(send, 201, [(b"location", f"{PATH}/{created.job_id}".encode()), *_JSON], self._encode(created))

    async def _problem(self, send: Send, scope: dict[str, Any], exc: errors.KairosError) -> None:
        parameters = frozenset({"path", *(name.decode("latin-1").lower() for name, _ in scope["headers"])})
        body, headers = problems.error_answer(exc, PATH, parameters)
        extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await _answer(send, body["status"], [*extra, *_PROBLEM], self._encode(body))


async def _body(receive: Receive, read: list[Message], limit: int) -> bytes:
    """The whole request body, each message kept in ``read``; _Fallback past ``limit`` or on a disconnect."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            raise _Fallback
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _Fallback
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _replay(read: list[Message], receive: Receive) -> Receive:
    """``receive`` as if nothing had been taken from it: the messages in ``read`` first."""
    pending = list(read)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
