"""`kairos dead-letters ls|replay` against a real API; dead executions are made the way a worker makes
them (leased and failed without retry through the store), beside a job submitted with the CLI."""

from __future__ import annotations

import asyncio
import importlib
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from app.domain.queues import tenant_queue
from app.store import executions as ex
from app.store.db import Database, create_engine
from tests import factories as tf
from tests.api.conftest import ApiProcess, TenantKey, query
from tests.cli.conftest import Kairos, closed_url


def dead_executions(
    database_url: str, tenant: TenantKey, job_id: str, count: int, *, error: str = "boom", pool: str = "emails"
) -> list[str]:
    """``count`` executions of the job, leased by worker 'cli-test' and failed without retry: dead."""

    async def work() -> list[str]:
        db = Database(create_engine(database_url, pool_size=1))
        try:
            start = datetime.now(timezone.utc) - timedelta(hours=1)
            made = await tf.insert_ready(
                db, [uuid.UUID(job_id)] * count, [start + timedelta(seconds=i) for i in range(count)]
            )
            queue = tenant_queue(tenant.tenant_id, pool)
            held = await db.transaction(lambda tx: tx.executions.lease(queue, "cli-test", count, 30))
            assert {h.execution_id for h in held} == {str(e) for e in made}  # leased ids are text
            await db.transaction(
                lambda tx: tx.executions.fail_many(
                    [ex.Failure(h.execution_id, h.attempt, error, retryable=False) for h in held]
                )
            )
            return [str(e) for e in made]
        finally:
            await db.close()

    return asyncio.run(work())


def job(kairos: Kairos, name: str) -> str:
    made = kairos("jobs", "submit", "--name", name, "--in", "2h", "--pool", "emails", "--json")
    assert made.code == 0, made.err
    return made.json()["jobId"]


def states(database_url: str, ids: list[str]) -> dict[str, str]:
    rows = query(
        database_url,
        "SELECT execution_id::text, state FROM executions WHERE execution_id = ANY(%s)",
        ([uuid.UUID(i) for i in ids],),
    )
    return dict(rows)


def test_ls_pages_filters_by_job_and_since(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    a, b = job(kairos, "a"), job(kairos, "b")
    dead_a = dead_executions(cli_api.database_url, tenant, a, 3, error="exit 65")
    dead_b = dead_executions(cli_api.database_url, tenant, b, 1)
    every = kairos("dead-letters", "ls", "--json").json()
    assert {d["executionId"] for d in every["deadLetters"]} == set(dead_a + dead_b)
    by_job = kairos("dead-letters", "ls", "--job", a, "--limit", "2", "--json").json()
    assert len(by_job["deadLetters"]) == 2 and by_job["nextCursor"]
    assert {
        d["executionId"]
        for d in kairos("dead-letters", "ls", "--job", a, "--limit", "2", "--all", "--json").json()["deadLetters"]
    } == set(dead_a)
    assert kairos("dead-letters", "ls", "--since", "1h", "--json").json()["deadLetters"] != []
    query(
        cli_api.database_url,
        "UPDATE executions SET finished_at = now() - interval '3 hours' WHERE execution_id = ANY(%s)",
        ([uuid.UUID(i) for i in dead_b],),
    )
    recent = kairos("dead-letters", "ls", "--since", "2h", "--all", "--limit", "1", "--json").json()
    assert {d["executionId"] for d in recent["deadLetters"]} == set(dead_a) and recent["nextCursor"] is None
    table = kairos("dead-letters", "ls")
    assert "exit 65" in table.out and "1/1" not in table.out and dead_a[0] in table.out


def test_replay_by_id_with_an_edited_payload(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    [eid, other] = dead_executions(cli_api.database_url, tenant, job(kairos, "one"), 2)
    done = kairos("dead-letters", "replay", eid, "--payload", '{"v": 2}', "--max-attempts", "2", "--json")
    assert done.code == 0, done.err
    [replayed] = done.json()["replayed"]
    assert replayed["executionId"] == eid and replayed["state"] == "ready"
    assert (replayed["attempt"], replayed["maxAttempts"], replayed["lastAttempt"]) == (1, 2, 3)
    assert states(cli_api.database_url, [eid, other]) == {eid: "ready", other: "dead"}
    again = kairos("dead-letters", "replay", eid, other)
    assert again.code == 2 and again.err.strip().endswith("error: 1 of 2 executions were not replayed")
    assert (
        f"{eid}: The execution is not in a state that allows this: only a dead execution can be replayed" in again.err
    )
    assert states(cli_api.database_url, [other]) == {other: "ready"}


def test_bulk_replay_loops_over_bounded_calls(
    kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.cli import client

    # Several calls for five executions (app.cli.dead_letters, the attribute, is the click group).
    monkeypatch.setattr(importlib.import_module("app.cli.dead_letters"), "BULK_REPLAY_MAX", 2)
    calls: list[int] = []
    original = client.KairosClient.replay_dead_letters

    def counted(self: client.KairosClient, **kwargs: object) -> client.BulkReplayed:
        calls.append(int(kwargs["limit"]))  # type: ignore[call-overload]
        return original(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client.KairosClient, "replay_dead_letters", counted)
    target, keep = job(kairos, "bulk"), job(kairos, "keep")
    dead = dead_executions(cli_api.database_url, tenant, target, 5)
    kept = dead_executions(cli_api.database_url, tenant, keep, 1)
    some = kairos("dead-letters", "replay", "--job", target, "--max", "3", "--json")
    assert some.code == 0, some.err
    assert (some.json()["replayed"], some.json()["matched"], some.json()["complete"]) == (3, 5, True)
    assert calls == [2, 1]
    rest = kairos("dead-letters", "replay", "--job", target)
    assert rest.code == 0 and rest.out.strip() == "replayed 2 of 2 matching dead letters"
    assert set(states(cli_api.database_url, dead).values()) == {"ready"}
    assert states(cli_api.database_url, kept) == {kept[0]: "dead"}
    nothing = kairos("dead-letters", "replay", "--job", target, "--json")
    assert nothing.code == 0 and nothing.json()["replayed"] == 0


def test_a_spent_replay_budget_stops_the_loop_with_one_line(
    kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.cli import client

    target = job(kairos, "budget")
    dead = dead_executions(cli_api.database_url, tenant, target, 3)
    original = client.KairosClient.replay_dead_letters

    def budget_of_one(self: client.KairosClient, **kwargs: object) -> client.BulkReplayed:
        out = original(self, **{**kwargs, "limit": 1})  # type: ignore[arg-type]
        return {**out, "budgetLeft": 0}  # what the API answers once the tenant's budget is spent

    monkeypatch.setattr(client.KairosClient, "replay_dead_letters", budget_of_one)
    result = kairos("dead-letters", "replay", "--all")
    assert result.code == 2
    assert result.error_line.startswith(
        "error: The tenant's bulk replay budget is spent: 1 of 3 replayed; it resets at "
    )
    assert sorted(states(cli_api.database_url, dead).values()) == ["dead", "dead", "ready"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("dead-letters", "replay"), "name EXECUTION_IDs, or select with --job"),
        (
            ("dead-letters", "replay", "--job", "0b7c1e9e-95a1-4b7a-9a57-0f5d2b0e8c11", "--payload", "{}"),
            "--payload apply to EXECUTION_IDs only",
        ),
        (("dead-letters", "replay", "0b7c1e9e-95a1-4b7a-9a57-0f5d2b0e8c11", "--all"), "leave them out"),
        (("dead-letters", "replay", "--since", "1h", "--finished-after", "2030-01-01T00:00:00Z"), "not both"),
        (("dead-letters", "replay", "--finished-after", "2999-01-01T00:00:00Z"), "the window is empty"),
        (("dead-letters", "replay", "--since", "yesterday"), "is not a duration"),
        (("dead-letters", "replay", "not-an-id"), "is not a execution id"),
        (("dead-letters", "ls", "--job", "nope"), "is not a job id"),
    ],
)
def test_bad_input_exits_2_before_any_request(kairos: Kairos, args: tuple[str, ...], message: str) -> None:
    result = kairos(*args, env={"KAIROS_API_URL": closed_url()})
    assert result.code == 2 and message in result.error_line
