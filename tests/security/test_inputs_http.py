"""What the HTTP layer refuses before a handler runs, over raw sockets and httpx against `kairos api`:
oversize heads (431), requests that are not HTTP (400), methods a path does not take (405 with
Allow), and OPTIONS listing the methods a path does take. Every refusal is application/problem+json."""

from __future__ import annotations

import contextlib
import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.conftest import ApiProcess
from tests.api.test_jobs_api import once_job

PROBLEM = "application/problem+json"
LIMIT = 32 * 1024  # KAIROS_API_MAX_HEADER_BYTES's default


def exchange(api: ApiProcess, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` on a fresh connection; the status, headers and body of the first answer."""
    url = urlsplit(api.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as conn:
        # The server may close while a large head is still being sent; its answer is read below.
        with contextlib.suppress(OSError):
            conn.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 4 + _length(answer):
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def problem_in(status: int, headers: dict[str, str], body: bytes, expected: int) -> dict:
    assert status == expected, body
    assert headers["content-type"].startswith(PROBLEM), headers
    problem = json.loads(body)
    assert problem["status"] == expected and problem["title"] and problem["detail"]
    return problem


def test_a_one_mebibyte_authorization_header_is_refused_with_431(api: ApiProcess) -> None:
    request = b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"k" * (1024 * 1024) + b"\r\n\r\n"
    problem = problem_in(*exchange(api, request), 431)
    assert str(LIMIT) in problem["detail"]
    # The same through an ordinary client.
    resp = httpx.get(f"{api.url}/v1/jobs", headers={"Authorization": "Bearer " + "k" * (1024 * 1024)})
    assert resp.status_code == 431 and resp.headers["content-type"].startswith(PROBLEM)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (LIMIT + 100) + b"\r\n\r\n",  # one chunk, over
        b"GET /" + b"a" * (LIMIT + 100) + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a long request line
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Many: abcdefgh\r\n" * 3000 + b"\r\n",  # many small headers
    ],
)
def test_a_head_over_the_limit_is_431(api: ApiProcess, request_bytes: bytes) -> None:
    problem_in(*exchange(api, request_bytes), 431)


def test_a_head_under_the_limit_is_served(api: ApiProcess) -> None:
    status, _, body = exchange(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (LIMIT // 2) + b"\r\n\r\n")
    assert status == 200 and json.loads(body)["status"] == "ok"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello on the plain port
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n",
    ],
)
def test_a_request_that_is_not_http_is_400_problem_json(api: ApiProcess, request_bytes: bytes) -> None:
    assert problem_in(*exchange(api, request_bytes), 400)["type"].endswith("/malformed-request")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/jobs", "GET, POST, OPTIONS"),
        ("DELETE", "/v1/jobs", "GET, POST, OPTIONS"),
        ("PUT", "/v1/jobs/{job}", "GET, PATCH, DELETE, OPTIONS"),
        ("POST", "/v1/jobs/{job}", "GET, PATCH, DELETE, OPTIONS"),
        ("GET", "/v1/jobs/{job}:pause", "POST, OPTIONS"),
        ("DELETE", "/v1/jobs/{job}:resume", "POST, OPTIONS"),
        ("GET", "/v1/jobs:batch", "POST, OPTIONS"),
        ("POST", "/v1/dead-letters", "GET, OPTIONS"),
        ("TRACE", "/healthz", "GET, OPTIONS"),
    ],
)
def test_a_method_the_path_does_not_take_is_405_with_allow(
    client: httpx.Client, method: str, path: str, allow: str
) -> None:
    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    resp = client.request(method, path.format(job=job_id))
    assert resp.status_code == 405, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    assert resp.headers["allow"] == allow
    assert resp.json()["status"] == 405
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "active"  # nothing happened to the job


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/jobs", "GET, POST, OPTIONS"),
        ("/v1/jobs/{job}", "GET, PATCH, DELETE, OPTIONS"),
        ("/v1/jobs/{job}:pause", "POST, OPTIONS"),
        ("/v1/jobs/{job}/executions", "GET, OPTIONS"),
        ("/v1/jobs:batch", "POST, OPTIONS"),
        ("/v1/executions/{job}:replay", "POST, OPTIONS"),
        ("/v1/schedules/preview", "GET, OPTIONS"),
    ],
)
def test_options_lists_the_methods_of_the_path(client: httpx.Client, path: str, allow: str) -> None:
    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    resp = client.options(path.format(job=job_id))
    assert resp.status_code == 204
    assert resp.headers["allow"] == allow


def test_options_agrees_with_the_openapi_document(api: ApiProcess, client: httpx.Client) -> None:
    """Every documented path answers OPTIONS with exactly its documented methods (and OPTIONS)."""
    document = httpx.get(f"{api.url}/schema/openapi.json").json()
    ident = "00000000-0000-4000-8000-000000000000"
    for path, item in document["paths"].items():
        concrete = path.replace("{jobId}", ident).replace("{executionId}", ident)
        documented = {m.upper() for m in item if m in ("get", "post", "put", "patch", "delete")}
        resp = client.options(concrete)
        assert resp.status_code == 204, (path, resp.text)
        assert set(resp.headers["allow"].split(", ")) - {"OPTIONS"} == documented, path
