"""Dead-letter routes through the real Litestar app: listing, replay (single and bulk), budgets."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from litestar.testing import AsyncTestClient

from app.api.app import create_app
from app.api.dead_letters import controller as dead_letters
from app.config import Settings
from app.store import executions as ex
from app.store.db import Database
from tests import factories as tf


@pytest.fixture
async def api(db: Database) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(Settings(), db)) as client:
        yield client


async def dead_execution(db: Database, t: tf.TenantFixture, error: str = "boom", payload=None):
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=1, payload=payload)
    [eid] = await tf.ready_executions(db, job)
    [held] = await db.transaction(lambda c: c.executions.lease(queue, "w", 1, 30))
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, error)]))
    return job, eid


def auth(t: tf.TenantFixture) -> dict[str, str]:
    return {"Authorization": f"Bearer {t.key}"}


async def test_list_dead_letters_pages_and_is_tenant_scoped(db: Database, api: AsyncTestClient) -> None:
    t, other = await tf.tenant(db), await tf.tenant(db)
    made = [await dead_execution(db, t, f"error {i}") for i in range(3)]
    await dead_execution(db, other)
    r = await api.get("/v1/dead-letters?limit=2", headers=auth(t))
    assert r.status_code == 200, r.text
    first = r.json()
    assert len(first) == 2 and 'rel="next"' in r.headers["link"]
    assert {"executionId", "jobId", "scheduledFor", "attempt", "maxAttempts", "finishedAt", "error"} <= set(first[0])
    nxt = r.headers["link"].split(">")[0].lstrip("<")
    second = (await api.get(nxt, headers=auth(t))).json()
    ids = {d["executionId"] for d in first + second}
    assert ids == {str(eid) for _, eid in made}
    assert {d["error"] for d in first + second} == {"error 0", "error 1", "error 2"}
    by_job = (await api.get(f"/v1/dead-letters?jobId={made[0][0]}", headers=auth(t))).json()
    assert [d["executionId"] for d in by_job] == [str(made[0][1])]
    assert (await api.get("/v1/dead-letters")).status_code == 401


async def test_replay_one_with_edited_payload_and_policy(db: Database, api: AsyncTestClient) -> None:
    t, other = await tf.tenant(db), await tf.tenant(db)
    _job, eid = await dead_execution(db, t, payload={"v": 1})
    assert (await api.post(f"/v1/executions/{eid}:replay", headers=auth(other))).status_code == 404
    r = await api.post(
        f"/v1/executions/{eid}:replay",
        headers=auth(t),
        json={"payload": {"v": 2}, "retry": {"maxAttempts": 2, "backoffSeconds": 5}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "ready" and body["attempt"] == 1 and body["maxAttempts"] == 2 and body["lastAttempt"] == 3
    queue = tf.tenant_queue(t.tenant_id, "p")
    [held] = await db.transaction(lambda c: c.executions.lease(queue, "w", 1, 30))
    assert held.execution_id == str(eid) and held.attempt == 2 and held.payload == {"v": 2}
    # Not dead any more: a second replay is a conflict, a bad verb or id is refused.
    assert (await api.post(f"/v1/executions/{eid}:replay", headers=auth(t))).status_code == 409
    assert (await api.post(f"/v1/executions/{eid}:rerun", headers=auth(t))).status_code in (400, 422)
    assert (await api.post("/v1/executions/nope:replay", headers=auth(t))).status_code == 404
    bad = await api.post(f"/v1/executions/{eid}:replay", headers=auth(t), json={"retry": {"maxAttempts": 0}})
    assert bad.status_code == 422 and bad.json()["field"] == "/retry/maxAttempts"
    # Attempts history of the execution.
    r = await api.get(f"/v1/executions/{eid}/attempts", headers=auth(t))
    assert [(a["attempt"], a["outcome"]) for a in r.json()] == [(1, "failed"), (2, "running")]


async def test_bulk_replay_with_filter_is_budgeted_per_tenant(
    db: Database, api: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dead_letters, "REPLAY_PER_WINDOW", 3)
    t = await tf.tenant(db)
    made = [await dead_execution(db, t) for _ in range(4)]
    only_first = await api.post("/v1/dead-letters:replay", headers=auth(t), json={"jobId": str(made[0][0])})
    assert only_first.status_code == 200, only_first.text
    assert only_first.json()["executionIds"] == [str(made[0][1])] and only_first.json()["budgetLeft"] == 2
    rest = (await api.post("/v1/dead-letters:replay", headers=auth(t), json={"limit": 10})).json()
    assert rest["replayed"] == 2 and rest["budgetLeft"] == 0
    spent = await api.post("/v1/dead-letters:replay", headers=auth(t), json={})
    assert spent.status_code == 429
    assert spent.headers["content-type"].startswith("application/problem+json")
    # When to come back: the window's end, as a header and in the problem (RFC 9110 Retry-After).
    assert 1 <= int(spent.headers["retry-after"]) <= dead_letters.REPLAY_WINDOW_S
    assert spent.json()["retryAfterSeconds"] == int(spent.headers["retry-after"])
    assert spent.json()["quota"] == "bulkReplayPerWindow" and spent.json()["limit"] == 3
    remaining = (await api.get("/v1/dead-letters", headers=auth(t))).json()
    assert len(remaining) == 1
