"""A typed client for the Kairos REST API (httpx), for the tenant commands of ``kairos``.

Responses are checked against the TypedDicts below (camelCase, as on the wire) with
``msgspec.convert`` and handed back as the JSON the server sent, so ``--json`` prints fields this
client does not know yet. Every failure is an :class:`ApiFailure` carrying one line and an exit
code: an RFC 9457 problem with a 4xx status exits 2 (``error: <title>: <detail> (field <field>)``),
5xx answers, unreadable answers and connection failures exit 1. The URL and key come from the
command line (``--api-url``, ``--api-key``, or ``KAIROS_API_URL`` and ``KAIROS_API_KEY`` read by click).

Adding an endpoint is one method: ``self.call("POST", f"/v1/jobs/{job_id}:run", expect=Execution)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, NotRequired, TypedDict, TypeVar, cast
from urllib.parse import parse_qs, urlsplit

import httpx
import msgspec

DEFAULT_API_URL = "http://127.0.0.1:8080"
API_URL_ENV = "KAIROS_API_URL"
API_KEY_ENV = "KAIROS_API_KEY"
PAGE_MAX = 500  # the API's largest page (app/api/pagination.py)
BATCH_MAX = 1000  # jobs per POST /v1/jobs:batch
BULK_REPLAY_MAX = 1000  # executions per POST /v1/dead-letters:replay

T = TypeVar("T")


# -- what the API answers ------------------------------------------------------------------------------


class Target(TypedDict):
    type: str
    ref: str
    method: NotRequired[str | None]
    headers: NotRequired[dict[str, str] | None]
    auth: NotRequired[dict[str, Any] | None]


class Dst(TypedDict, total=False):
    gap: str | None
    repeat: str | None


class Schedule(TypedDict, total=False):
    runAt: str | None
    cron: str | None
    every: str | None
    startAt: str | None
    endAt: str | None
    tz: str | None
    jitterSeconds: int | None
    dst: Dst | None


class Retry(TypedDict):
    maxAttempts: int
    backoffSeconds: float
    maxBackoffSeconds: float


class Job(TypedDict):
    jobId: str
    name: str
    state: str
    target: Target
    schedule: Schedule
    payload: Any
    retry: Retry
    timeoutSeconds: int
    concurrency: str
    misfire: str
    nextRunAt: str | None
    pausedAt: str | None
    createdAt: str
    updatedAt: str
    version: int
    labels: NotRequired[dict[str, str]]
    dryRun: NotRequired[bool]
    lastOutcome: NotRequired[str | None]
    bufferedAt: NotRequired[str | None]
    pauseOnFailure: NotRequired[bool]
    pausedReason: NotRequired[str | None]
    maxRuns: NotRequired[int | None]
    remainingRuns: NotRequired[int | None]
    deleteAfterCompletionSeconds: NotRequired[int | None]


class RunOut(TypedDict):
    executionId: str
    job: Job


class BackfillOut(TypedDict):
    created: int
    existing: int
    nextFrom: str | None
    note: NotRequired[str]


class JobPage(TypedDict):
    jobs: list[Job]
    nextCursor: str | None


class JobCreated(TypedDict):
    jobId: str
    nextRunAt: str | None


class BatchResult(TypedDict, total=False):
    """An item of POST /v1/jobs:batch: the stored job, or the problem object of a refused item."""

    jobId: str
    nextRunAt: str | None
    error: dict[str, Any]
    index: int


class BatchOut(TypedDict):
    results: list[BatchResult]


class Execution(TypedDict):
    executionId: str
    scheduledFor: str
    attempt: int
    state: str
    startedAt: str | None
    finishedAt: str | None
    error: str | None
    trigger: NotRequired[str]


class Attempt(TypedDict):
    attempt: int
    workerId: str
    leasedAt: str
    leaseUntil: str
    finishedAt: str | None
    outcome: str
    error: str | None
    result: Any


class DeadLetter(TypedDict):
    executionId: str
    jobId: str
    scheduledFor: str
    attempt: int
    maxAttempts: int
    finishedAt: str
    error: str | None


class Replayed(TypedDict):
    executionId: str
    jobId: str
    state: str
    attempt: int
    maxAttempts: int  # the attempts the replay grants, counted from the replay
    readyAt: str
    lastAttempt: int


class BulkReplayed(TypedDict):
    replayed: int
    executionIds: list[str]
    budgetLeft: int
    budgetResetsAt: str


class FireTime(TypedDict):
    utc: str
    local: str
    dstNote: str | None
    skipped: bool


class Preview(TypedDict):
    fireTimes: list[FireTime]


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


# -- failures ------------------------------------------------------------------------------------------


class ApiFailure(Exception):
    """A request that did not succeed: ``message`` is the one line for stderr."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Problem(ApiFailure):
    """An RFC 9457 problem answer (or a bare error status): 4xx exits 2, 5xx exits 1."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        field: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        self.status, self.title, self.detail, self.field = status, title, detail, field
        self.body = dict(body or {})
        super().__init__(problem_line(title, detail, field), 2 if 400 <= status < 500 else 1)

    @classmethod
    def of(cls, status: int, body: Any) -> Problem:
        if isinstance(body, dict) and ("title" in body or "detail" in body):
            field = body.get("field")
            return cls(
                status,
                str(body.get("title") or f"HTTP {status}"),
                None if body.get("detail") is None else str(body["detail"]),
                None if field is None else str(field),
                body,
            )
        return cls(status, f"HTTP {status}", None, None, body if isinstance(body, dict) else None)


def problem_line(title: str, detail: str | None, field: str | None) -> str:
    """``<title>: <detail> (field <field>)``, leaving out what is missing or repeats the title."""
    line = title.rstrip(".")
    if detail and detail.rstrip(".") != line:
        line += f": {detail}"
    if field:
        line += f" (field {field})"
    return " ".join(line.split())


# -- the client ----------------------------------------------------------------------------------------


def _cursor_of(response: httpx.Response, body: Any) -> str | None:
    """The next page's cursor: ``nextCursor`` in the body, or the cursor of the Link rel=next URL."""
    if isinstance(body, dict) and body.get("nextCursor"):
        return str(body["nextCursor"])
    link = response.links.get("next")
    if not link or not link.get("url"):
        return None
    values = parse_qs(urlsplit(link["url"]).query).get("cursor")
    return values[0] if values else None


class KairosClient:
    """One tenant's view of the API. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport)

    def __enter__(self) -> KairosClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- the one request path --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[httpx.Response, Any]:
        """Send one request; the response and its decoded JSON body (None when empty)."""
        if not self.api_key:
            raise ApiFailure(
                f"no API key: set {API_KEY_ENV} or pass --api-key (`kairos tenants create` prints one)", exit_code=2
            )
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, params=query, json=json, headers=headers)
        except httpx.TimeoutException:
            raise ApiFailure(f"the Kairos API at {self.base_url} did not answer in time") from None
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ApiFailure(f"cannot reach the Kairos API at {self.base_url}: {reason}") from None
        body: Any = None
        if response.content:
            try:
                body = response.json()
            except ValueError:
                if response.is_success:
                    raise ApiFailure(
                        f"{method} {path}: the API answered {response.status_code} with a body that is not JSON"
                    ) from None
        if not response.is_success:
            raise Problem.of(response.status_code, body)
        return response, body

    def call(
        self,
        method: str,
        path: str,
        *,
        expect: type[T],
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> T:
        """One request whose JSON body must have the shape ``expect``."""
        _, body = self.request(method, path, params=params, json=json, headers=headers)
        return cast(T, self._checked(method, path, body, expect))

    def page(
        self,
        path: str,
        *,
        expect: type[T],
        params: Mapping[str, Any] | None = None,
        items: Callable[[Any], Any] = lambda body: body,
    ) -> Page[T]:
        """One page of a list endpoint (a bare array with a Link header, or an object with nextCursor)."""
        response, body = self.request("GET", path, params=params)
        rows = self._checked("GET", path, items(body), list[expect])  # type: ignore[valid-type]
        return Page(rows, _cursor_of(response, body))

    @staticmethod
    def _checked(method: str, path: str, body: Any, expect: Any) -> Any:
        try:
            msgspec.convert(body, type=expect)
        except msgspec.ValidationError as exc:
            raise ApiFailure(f"{method} {path}: unexpected answer from the API ({exc})") from None
        return body

    # -- jobs ------------------------------------------------------------------------------------------

    def create_job(self, body: Mapping[str, Any], idempotency_key: str | None = None) -> JobCreated:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.call("POST", "/v1/jobs", json=body, headers=headers, expect=JobCreated)

    def create_jobs(self, items: list[Mapping[str, Any]]) -> list[BatchResult]:
        """POST /v1/jobs:batch (at most BATCH_MAX items; each may carry its own idempotencyKey)."""
        return self.call("POST", "/v1/jobs:batch", json={"jobs": items}, expect=BatchOut)["results"]

    def list_jobs(
        self,
        *,
        state: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        name_prefix: str | None = None,
        labels: Sequence[str] = (),
    ) -> Page[Job]:
        params = {
            "state": state,
            "name": name,
            "namePrefix": name_prefix,
            "label": list(labels) or None,
            "limit": limit,
            "cursor": cursor,
        }
        return self.page(
            "/v1/jobs",
            params=params,
            items=lambda body: body.get("jobs") if isinstance(body, dict) else body,
            expect=Job,
        )

    def update_job(self, job_id: str, patch: Mapping[str, Any], if_version: int | None = None) -> Job:
        """PATCH /v1/jobs/{jobId}: a JSON Merge Patch of the submit body."""
        headers = {"If-Match": f'"{if_version}"'} if if_version is not None else None
        return self.call("PATCH", f"/v1/jobs/{job_id}", json=patch, headers=headers, expect=Job)

    def run_job(self, job_id: str, overlap: str | None = None) -> RunOut:
        return self.call("POST", f"/v1/jobs/{job_id}:run", json={"overlap": overlap} if overlap else {}, expect=RunOut)

    def backfill_job(self, job_id: str, start: str, end: str, overlap: str | None = None) -> BackfillOut:
        body = {"from": start, "to": end, **({"overlap": overlap} if overlap else {})}
        return self.call("POST", f"/v1/jobs/{job_id}:backfill", json=body, expect=BackfillOut)

    def get_job(self, job_id: str) -> Job:
        return self.call("GET", f"/v1/jobs/{job_id}", expect=Job)

    def cancel_job(self, job_id: str) -> None:
        self.request("DELETE", f"/v1/jobs/{job_id}")

    def pause_job(self, job_id: str) -> Job:
        return self.call("POST", f"/v1/jobs/{job_id}:pause", expect=Job)

    def resume_job(self, job_id: str, missed: Literal["skip", "run_once"] = "skip") -> Job:
        return self.call("POST", f"/v1/jobs/{job_id}:resume", json={"missed": missed}, expect=Job)

    def job_executions(self, job_id: str, *, limit: int | None = None, cursor: str | None = None) -> Page[Execution]:
        return self.page(f"/v1/jobs/{job_id}/executions", params={"limit": limit, "cursor": cursor}, expect=Execution)

    def preview(self, cron: str, tz: str, *, count: int = 10, start: str | None = None) -> Preview:
        return self.call(
            "GET",
            "/v1/schedules/preview",
            params={"cron": cron, "tz": tz, "count": count, "from": start},
            expect=Preview,
        )

    # -- executions and dead letters -------------------------------------------------------------------

    def attempts(self, execution_id: str) -> list[Attempt]:
        return self.call("GET", f"/v1/executions/{execution_id}/attempts", expect=list[Attempt])

    def dead_letters(
        self, *, job_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[DeadLetter]:
        return self.page(
            "/v1/dead-letters", params={"jobId": job_id, "limit": limit, "cursor": cursor}, expect=DeadLetter
        )

    def replay(self, execution_id: str, body: Mapping[str, Any] | None = None) -> Replayed:
        return self.call("POST", f"/v1/executions/{execution_id}:replay", json=body or None, expect=Replayed)

    def replay_dead_letters(
        self,
        *,
        job_id: str | None = None,
        finished_after: str | None = None,
        finished_before: str | None = None,
        limit: int = 100,
    ) -> BulkReplayed:
        body = {
            k: v
            for k, v in (
                ("jobId", job_id),
                ("finishedAfter", finished_after),
                ("finishedBefore", finished_before),
                ("limit", limit),
            )
            if v is not None
        }
        return self.call("POST", "/v1/dead-letters:replay", json=body, expect=BulkReplayed)


def every_page(
    fetch: Callable[[str | None], Page[T]], *, cursor: str | None = None, all_pages: bool = True
) -> Iterator[Page[T]]:
    """``fetch(cursor)`` page after page, following next cursors while ``all_pages``."""
    while True:
        page = fetch(cursor)
        yield page
        if not all_pages or page.next_cursor is None:
            return
        cursor = page.next_cursor
