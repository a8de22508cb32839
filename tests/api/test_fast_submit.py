"""POST /v1/jobs, answered in front of Litestar's router by app.api.jobs.create_route.

The route takes no query parameters, so ``POST /v1/jobs?via=query`` must be answered as ``POST /v1/jobs``:
the tests compare the two, byte for byte where nothing in the answer is new (a problem body) and field by
field where something is (a new job id). Its refusals are the ones the Litestar routes give (the batch
route's, compared below), rendered by the same code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.app import max_body_bytes
from app.config import load
from tests.api.conftest import ApiProcess, TenantKey, make_tenant, query, running_api
from tests.api.test_jobs_api import PROBLEM, once_job
from tests.api.test_quotas import set_quota
from tests.support.polling import wait_for

FAST, ROUTE = "/v1/jobs", "/v1/jobs?via=query"


@pytest.fixture(scope="module")
def served(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiProcess, Path]]:
    with running_api(module_database_url, tmp_path_factory) as (process, log):
        yield process, log


@pytest.fixture
def api(served: tuple[ApiProcess, Path]) -> ApiProcess:
    return served[0]


def post_both(client: httpx.Client, **kw) -> tuple[httpx.Response, httpx.Response]:
    return client.post(FAST, **kw), client.post(ROUTE, **kw)


def same_problem(fast: httpx.Response, route: httpx.Response) -> dict:
    assert fast.status_code == route.status_code, (fast.text, route.text)
    assert fast.headers["content-type"] == route.headers["content-type"] == PROBLEM
    assert fast.content == route.content
    for header in ("retry-after", "www-authenticate", "allow"):
        assert fast.headers.get(header) == route.headers.get(header), header
    return fast.json()


def jobs_named(api: ApiProcess, tenant: TenantKey, name: str) -> int:
    [(n,)] = query(
        api.database_url,
        "SELECT count(*) FROM jobs WHERE tenant_id = %(t)s AND name = %(n)s",
        {"t": tenant.tenant_id, "n": name},
    )
    return n


def test_a_created_job_is_answered_as_the_route_answers_it(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    fast, route = post_both(client, json=once_job(name="created"))
    assert fast.status_code == route.status_code == 201
    assert fast.headers["content-type"] == route.headers["content-type"] == "application/json"
    assert fast.json().keys() == route.json().keys() == {"jobId", "nextRunAt"}
    assert fast.json()["nextRunAt"] == route.json()["nextRunAt"]
    assert fast.headers["location"] == f"/v1/jobs/{fast.json()['jobId']}"
    assert int(fast.headers["content-length"]) == len(fast.content)
    stored = client.get(fast.headers["location"]).json()
    assert stored["name"] == "created" and stored["target"]["ref"] == once_job()["target"]["ref"]
    assert jobs_named(api, tenant, "created") == 2


def test_a_recurring_job_with_its_herd_warning_matches_the_route(client: httpx.Client) -> None:
    body = {"name": "cron", "target": {"type": "queue", "ref": "work"}, "schedule": {"cron": "0 9 * * *", "tz": "UTC"}}
    fast, route = post_both(client, json=body)
    assert fast.status_code == route.status_code == 201
    assert fast.json()["nextRunAt"] == route.json()["nextRunAt"]
    assert fast.json().get("warnings") == route.json().get("warnings")


@pytest.mark.parametrize(
    "content",
    [
        b'{"name": "x", "target": {"type": "queue", "ref": "work"}, "schedule": {"delaySeconds": -1}}',  # invalid
        b'{"name": "x", "target": {"type": "queue", "ref": "work"}, "schedule": {"delaySeconds": 5}, "bogus": 1}',
        b'{"name": "x",',  # not JSON
        b"",
        b'{"name": "x\\u0000", "target": {"type": "queue", "ref": "work"}, "schedule": {"delaySeconds": 5}}',
    ],
)
def test_a_body_that_is_not_a_valid_job_gets_the_routes_problem_and_writes_nothing(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, content: bytes
) -> None:
    fast, route = post_both(client, content=content, headers={"content-type": "application/json"})
    assert fast.status_code in (400, 422)
    same_problem(fast, route)
    [(n,)] = query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %(t)s", {"t": tenant.tenant_id})
    assert n == 0


@pytest.mark.parametrize("authorization", [None, "Basic abc", "Bearer", "Bearer not-a-key"])
def test_credentials_that_do_not_authenticate_get_the_routes_401(api: ApiProcess, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    with httpx.Client(base_url=api.url, headers=headers) as anonymous:
        fast, route = post_both(anonymous, json=once_job())
    assert fast.status_code == 401
    same_problem(fast, route)


def test_a_repeated_authorization_header_counts_by_its_first_value(api: ApiProcess, tenant: TenantKey) -> None:
    other = make_tenant(api.database_url)
    headers = [
        ("Authorization", f"Bearer {tenant.key}"),
        ("Authorization", f"Bearer {other.key}"),
        ("Content-Type", "application/json"),
    ]
    content = json.dumps(once_job(name="twice")).encode()
    with httpx.Client(base_url=api.url) as c:
        fast = c.post(FAST, content=content, headers=headers)
        route = c.post(ROUTE, content=content, headers=headers)
    assert fast.status_code == route.status_code == 201
    assert jobs_named(api, tenant, "twice") == 2 and jobs_named(api, other, "twice") == 0


def test_an_idempotency_key_replays_and_conflicts_as_on_the_route(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    first = client.post(FAST, json=once_job(name="idem"), headers={"Idempotency-Key": "k-1"})
    again_fast = client.post(FAST, json=once_job(name="idem"), headers={"Idempotency-Key": "k-1"})
    again_route = client.post(ROUTE, json=once_job(name="idem"), headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again_fast.status_code == again_route.status_code == 201
    assert first.json() == again_fast.json() == again_route.json()
    assert jobs_named(api, tenant, "idem") == 1
    # The same key with another body: the writer's IdempotencyConflict.
    fast, route = post_both(client, json=once_job(name="other"), headers={"Idempotency-Key": "k-1"})
    assert same_problem(fast, route)["status"] == 409
    long_key = {"Idempotency-Key": "k" * 256}
    fast, route = post_both(client, json=once_job(name="long"), headers=long_key)
    assert same_problem(fast, route)["field"] == "Idempotency-Key"
    assert jobs_named(api, tenant, "other") == jobs_named(api, tenant, "long") == 0


def test_over_a_quota_the_route_answers_429(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    set_quota(api, tenant, max_active_jobs=1)
    assert client.post(FAST, json=once_job(name="only")).status_code == 201
    fast, route = post_both(client, json=once_job(name="over"))
    problem = same_problem(fast, route)
    assert problem["status"] == 429 and problem["quota"] == "maxActiveJobs"
    assert jobs_named(api, tenant, "over") == 0


def test_a_body_sent_in_chunks_is_read_whole(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    content = json.dumps(once_job(name="chunked", payload={"n": "x" * 5000})).encode()
    pieces = [content[i : i + 997] for i in range(0, len(content), 997)]
    made = client.post(FAST, content=iter(pieces), headers={"content-type": "application/json"})
    assert made.status_code == 201, made.text
    assert client.get(made.headers["location"]).json()["payload"] == {"n": "x" * 5000}


def test_a_body_over_the_limit_is_refused_by_the_route_with_or_without_its_length(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    limit = max_body_bytes(load())
    big = json.dumps(once_job(name="big", payload={"n": "x" * limit})).encode()
    fast, route = post_both(client, content=big, headers={"content-type": "application/json"})
    assert fast.status_code == 413
    same_problem(fast, route)
    chunked = client.post(FAST, content=iter([big[i : i + 65536] for i in range(0, len(big), 65536)]))
    assert chunked.status_code == 413
    assert jobs_named(api, tenant, "big") == 0


def test_the_request_log_line_names_the_route_and_the_tenant(
    served: tuple[ApiProcess, Path], client: httpx.Client, tenant: TenantKey
) -> None:
    _, log = served
    made = client.post(FAST, json=once_job(name="logged"))
    assert made.status_code == 201
    refused = client.post(FAST, json=once_job(name="logged"), headers={"Idempotency-Key": ""})
    assert refused.status_code == 422

    def lines() -> list[dict]:
        parsed = [json.loads(raw) for raw in log.read_text().splitlines() if raw.startswith("{")]
        mine = str(tenant.tenant_id)
        return [line for line in parsed if line.get("msg") == "request" and line.get("tenant_id") == mine]

    wait_for(lambda: len(lines()) >= 2, timeout_s=10, what="two request lines")
    assert [(line["method"], line["path"], line["status"]) for line in lines()] == [
        ("POST", "/v1/jobs", 201),
        ("POST", "/v1/jobs", 422),
    ]


# -- in process: the Litestar router behind the route counted ------------------------------------


class Counted:
    """An ASGI app that counts the http requests it is handed and passes them on."""

    def __init__(self, app) -> None:
        self.app, self.calls = app, 0

    async def __call__(self, scope, receive, send) -> None:
        self.calls += scope["type"] == "http"
        await self.app(scope, receive, send)


async def asgi_request(
    app, method: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]]
) -> tuple[int, bytes, dict]:
    path, _, query_string = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string.encode(),
        "root_path": "",
        "headers": [(b"host", b"test"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
        "state": {},
    }
    messages = [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.request", "body": body[10:], "more_body": False},
    ]
    answer: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        answer.append(message)

    await app(scope, receive, send)
    headers_out = {k.decode(): v.decode() for k, v in answer[0]["headers"]}
    return answer[0]["status"], b"".join(m.get("body", b"") for m in answer[1:]), headers_out


async def test_every_post_is_answered_by_the_route_and_nothing_else_by_it(db) -> None:
    from app.api.app import create_app

    created = await db.transaction(lambda c: c.tenants.create("fast"))
    assert created is not None
    _, key = created
    app = create_app(load(), db)
    router = app.asgi_handler.app
    app.asgi_handler.app = counted = Counted(router)
    auth = [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json")]
    job = json.dumps(once_job(name="in-process")).encode()

    for path, body, headers, status in [
        (FAST, job, auth, 201),
        (FAST + "/", job, auth, 201),
        (FAST, job, [*auth, (b"idempotency-key", b"k")], 201),
        (FAST, json.dumps(once_job(name="other")).encode(), [*auth, (b"idempotency-key", b"k")], 409),
        (ROUTE, job, auth, 201),  # a query string
        (FAST + "?bad%00=1", job, auth, 422),
        (FAST, b'{"name": 1}', auth, 422),  # not a job
        (FAST, job, auth[1:], 401),  # no key
        (FAST, b'{"name": 1}', [(b"authorization", b"Bearer nope"), *auth[1:]], 401),  # unknown key, before the body
    ]:
        got, text, _ = await asgi_request(app, "POST", path, body, headers)
        assert got == status, (path, text)
    assert counted.calls == 0
    # Any other method of the path is the router's; the path's methods include the route's POST.
    got, _, answered = await asgi_request(app, "OPTIONS", FAST, b"", auth)
    assert (got, answered["allow"], counted.calls) == (204, "GET, POST, OPTIONS", 1)
    got, _, answered = await asgi_request(app, "PUT", FAST, b"", auth)
    assert (got, answered["allow"], counted.calls) == (405, "GET, POST, OPTIONS", 2)
    assert (await asgi_request(app, "GET", FAST, b"", auth))[0] == 200 and counted.calls == 3


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-key"])
def test_a_refusal_is_the_one_the_litestar_routes_give(api: ApiProcess, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    with httpx.Client(base_url=api.url, headers=headers) as anonymous:
        single = anonymous.post(FAST, json=once_job())
        batch = anonymous.post("/v1/jobs:batch", json={"jobs": [once_job()]})
    assert single.status_code == batch.status_code == 401
    assert single.headers["www-authenticate"] == batch.headers["www-authenticate"]
    assert {**single.json(), "instance": None} == {**batch.json(), "instance": None}
