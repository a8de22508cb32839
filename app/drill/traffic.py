"""Work for a drill, submitted the way a tenant submits it: through the REST API, with API keys.

Three kinds of occurrence flow during a drill: a herd (one batch of one-off jobs all due at one
instant), a steady stream of one-off jobs (one every 1/rate seconds, each due ``lead_s`` after its
submit), and recurring jobs (``every`` N seconds, catch-up misfires so every occurrence is owed).
Only what the API acknowledged (201, or an item of a 200 batch with a jobId) counts as owed.

The ``Submitter`` holds the API addresses in order of preference, as a global load balancer
would: a connection error, a timeout or a 5xx moves it to the next address and the same request
is sent again with the same Idempotency-Key, so a submit whose answer was lost is never stored
twice and never counted unless acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

import httpx

log = logging.getLogger(__name__)

SUBMIT_TIMEOUT_S = 3.0
SUBMIT_GIVE_UP_S = 30.0  # one submit keeps trying the addresses this long (a failover in between)
BATCH_MAX = 1000  # POST /v1/jobs:batch takes at most this many items


@dataclass(frozen=True)
class Owed:
    """An acknowledged job and the occurrences it owes: one at ``first`` or, recurring, every ``every_s``."""

    job_id: UUID
    kind: str  # herd | steady | recurring
    first: float  # unix seconds of its first occurrence (the API's nextRunAt)
    every_s: float | None = None
    submitted: float = 0.0  # when the acknowledgement came back

    def occurrences(self, until: float) -> list[float]:
        """The instants it owes up to ``until`` (unix seconds)."""
        if self.every_s is None:
            return [self.first] if self.first <= until else []
        out, at = [], self.first
        while at <= until:
            out.append(at)
            at += self.every_s
        return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def _instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def one_off(name: str, pool: str, due: float) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"type": "queue", "ref": pool},
        "schedule": {"runAt": _iso(due)},
        "retry": {"maxAttempts": 10, "backoffSeconds": 0.5, "maxBackoffSeconds": 2},
    }


def recurring(name: str, pool: str, every_s: int) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"type": "queue", "ref": pool},
        "schedule": {"every": f"{every_s}s"},
        "misfire": "catch_up",
        "retry": {"maxAttempts": 10, "backoffSeconds": 0.5, "maxBackoffSeconds": 2},
    }


@dataclass
class Submitter:
    api_urls: list[str]
    api_key: str
    owed: list[Owed] = field(default_factory=list)
    refused: int = 0  # submits that never got an acknowledgement (not owed)
    failovers: int = 0  # times it moved to the next API address
    _current: int = 0
    _client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Submitter:
        self._client = httpx.AsyncClient(timeout=SUBMIT_TIMEOUT_S, headers={"Authorization": f"Bearer {self.api_key}"})
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def _post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response | None:
        assert self._client is not None
        deadline = time.monotonic() + SUBMIT_GIVE_UP_S
        delay = 0.1
        while time.monotonic() < deadline:
            url = self.api_urls[self._current % len(self.api_urls)]
            try:
                resp = await self._client.post(url + path, json=body, headers=headers)
                if resp.status_code < 500:
                    return resp
            except httpx.HTTPError:
                pass
            # Unreachable or failing: the next address (a region's API may be the one that died).
            self._current += 1
            self.failovers += 1
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)
        return None

    async def one(self, body: dict[str, Any], kind: str, every_s: float | None = None) -> Owed | None:
        resp = await self._post("/v1/jobs", body, {"Idempotency-Key": str(uuid.uuid4())})
        if resp is None or resp.status_code not in (200, 201):
            self.refused += 1
            if resp is not None:
                log.warning("drill submit refused", extra={"status": resp.status_code, "body": resp.text[:300]})
            return None
        answer = resp.json()
        owed = Owed(UUID(answer["jobId"]), kind, _instant(answer["nextRunAt"]), every_s, time.time())
        self.owed.append(owed)
        return owed

    async def many(self, bodies: list[dict[str, Any]], kind: str) -> int:
        """Submit in batches; returns how many were acknowledged."""
        acknowledged = 0
        for start in range(0, len(bodies), BATCH_MAX):
            chunk = [{**b, "idempotencyKey": str(uuid.uuid4())} for b in bodies[start : start + BATCH_MAX]]
            resp = await self._post("/v1/jobs:batch", {"jobs": chunk}, {})
            if resp is None or resp.status_code != 200:
                self.refused += len(chunk)
                continue
            now = time.time()
            for item in resp.json()["results"]:
                if item.get("jobId") and item.get("nextRunAt"):
                    self.owed.append(Owed(UUID(item["jobId"]), kind, _instant(item["nextRunAt"]), None, now))
                    acknowledged += 1
                else:
                    self.refused += 1
        return acknowledged

    async def steady(self, stop: asyncio.Event, *, pool: str, rate_per_s: float, lead_s: float) -> None:
        """One one-off job every 1/rate seconds, each due ``lead_s`` after it is sent, until ``stop``."""
        interval = 1.0 / rate_per_s
        next_at = time.monotonic()
        n = 0
        in_flight: set[asyncio.Task[Owed | None]] = set()
        while not stop.is_set():
            body = one_off(f"steady-{n}", pool, time.time() + lead_s)
            n += 1
            # Each submit on its own: one that waits out a failover must not hold the stream back.
            task = asyncio.create_task(self.one(body, "steady"))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            next_at += interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        if in_flight:
            await asyncio.wait(in_flight, timeout=SUBMIT_GIVE_UP_S + SUBMIT_TIMEOUT_S)
