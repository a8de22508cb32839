"""What an HTTP delivery sends: where (its target, parsed from the job's URL), with which headers, and the
verdict the pool reaches for a delivery (``app.executor.http_pool``)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from app.executor.breaker import Key
from app.executor.oidc import authorize
from app.executor.signing import sign
from app.store import executions as ex

# Headers Kairos writes on every delivery. A job's static header of one of these names, in any case, is
# dropped: the delivery's own value wins (receivers rely on them, and two of one name would be ambiguous).
RESERVED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "host",
        "user-agent",
        "accept-encoding",
        "idempotency-key",
        "traceparent",
        "tracestate",
        "kairos-job-id",
        "kairos-execution-id",
        "kairos-attempt",
        "kairos-scheduled-for",
        "kairos-signature",
    }
)


# RFC 9110 5.1 and 5.5: a field name is a token; a value, visible ASCII with spaces and tabs inside (obs-text,
# bytes over 0x7F, is refused: receivers read it in different charsets).
FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+").fullmatch
FIELD_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20\x09]*[\x21-\x7e])*)?").fullmatch


@dataclass(frozen=True)
class Verdict:
    outcome: str  # succeeded | retry | dead | deferred
    detail: str = ""
    retry_after_s: float | None = None


@dataclass(frozen=True)
class Target:
    key: Key
    scheme: str
    host: str
    port: int
    netloc: str  # as written (the Host header)
    path: str  # path and query, as written


def origin(item: ex.Leased) -> Target | Verdict:
    """Where a delivery goes, or the verdict of a target that can never be delivered to."""
    try:
        url = urlsplit(item.target_ref)
        host = url.hostname
        port = url.port or (443 if url.scheme == "https" else 80)
    except (TypeError, ValueError) as exc:
        return Verdict("dead", f"invalid target URL: {exc}")
    if url.scheme not in ("http", "https") or not host:
        return Verdict("dead", "target is not an absolute http(s) URL")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    netloc = url.netloc.rpartition("@")[2]  # never a userinfo part in Host
    return Target((item.tenant_id, f"{url.scheme}://{host}:{port}"), url.scheme, host, port, netloc, path)


def excerpt(raw: bytes, limit: int, encoding: str | None) -> str:
    """At most ``limit`` bytes of an answer as text the database can hold (no NUL, no control characters)."""
    if encoding and encoding.lower() != "identity":
        return f"[{encoding}-encoded body not shown]"
    text = raw[:limit].decode("utf-8", "replace")
    return "".join(c if c.isprintable() or c in "\t\n" else "\ufffd" for c in text)


@functools.lru_cache(maxsize=4096)  # a herd's deliveries share a handful of due times
def scheduled_text(scheduled_for: datetime) -> str:
    return ex.idempotency_time(scheduled_for)


def delivery_headers(item: ex.Leased, target: Target, body: bytes) -> dict[str, str]:
    """The request's headers: the job's own, less the names Kairos writes, then Kairos's (docs/http-delivery.md)."""
    # The job's static headers first, less those Kairos writes itself (compared in any case).
    headers = {k: v for k, v in (item.http_headers or {}).items() if k.lower() not in RESERVED_HEADERS}
    scheduled = scheduled_text(item.scheduled_for)  # as Leased.idempotency_key writes it
    headers.update(
        {
            "Content-Type": "application/json",
            "User-Agent": "Kairos/1",
            "Accept-Encoding": "identity",  # the excerpt of a failure's answer is read as it comes
            "Host": target.netloc,
            "Idempotency-Key": f"{item.job_id}:{scheduled}",
            "Kairos-Job-Id": item.job_id,
            "Kairos-Execution-Id": item.execution_id,
            "Kairos-Attempt": str(item.attempt),
            "Kairos-Scheduled-For": scheduled,
            "Kairos-Signature": sign(item.signing_secret, body),
        }
    )
    if item.http_auth is not None:  # its identity token, the only Authorization sent (app.executor.oidc)
        authorize(headers, item)
    return headers
