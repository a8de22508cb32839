"""The CockroachDB driver path and the transaction helper's handling of CockroachDB's errors.

CockroachDB cannot run here, so its errors are raised where PostgreSQL can raise them: a PL/pgSQL
DO block (test code only) raises a statement's SQLSTATE and message exactly as CockroachDB words
them, and a fake at the driver boundary (the dialect's ``do_commit``) makes a COMMIT that did or did
not land come back as 40003 "result is ambiguous". The sqlalchemy-cockroachdb dialect itself runs
against PostgreSQL here, which is how its statements are checked (test_cockroach_statements.py).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from app import errors
from app.api.jobs import service
from app.api.jobs.submit import Created, SubmitWriter
from app.config import Settings
from app.store import Database, Store
from app.store.db import _OneStatement, ambiguous, create_engine, isolation_for, normalise_url, retryable
from app.store.queries import driver_text
from tests import factories

RESTART = (
    "restart transaction: TransactionRetryWithProtoRefreshError: TransactionRetryError: "
    "retry txn (RETRY_SERIALIZABLE - failed preemptive refresh)"
)
AMBIGUOUS = "result is ambiguous (error=rpc error: code = Unavailable desc = transport is closing [exhausted])"


def raise_sqlstate(state: str, message: str) -> str:
    """A statement that fails with ``state`` and ``message``, as a CockroachDB server would."""
    return f"DO $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{state}'; END $$"


def wrapped(exc: psycopg.Error) -> OperationalError:
    return OperationalError("COMMIT", {}, exc)


def cockroach_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "cockroachdb+psycopg://")


# -- classification ---------------------------------------------------------------------------------


def test_cockroach_retry_errors_are_retryable_in_every_form() -> None:
    assert retryable(wrapped(psycopg.errors.SerializationFailure(RESTART)))  # 40001, as CockroachDB sends it
    assert retryable(wrapped(psycopg.errors.DeadlockDetected("deadlock detected")))  # 40P01
    # The message alone (a proxy or driver that lost the code) still means "run it again".
    assert retryable(wrapped(psycopg.errors.InternalError_(RESTART)))
    assert not retryable(wrapped(psycopg.errors.UniqueViolation("duplicate key value")))
    assert not retryable(wrapped(psycopg.errors.StatementCompletionUnknown(AMBIGUOUS)))


def test_ambiguous_commits_are_told_apart_from_retry_errors() -> None:
    assert ambiguous(wrapped(psycopg.errors.StatementCompletionUnknown(AMBIGUOUS)))  # 40003
    assert ambiguous(wrapped(psycopg.errors.InternalError_(AMBIGUOUS)))
    assert not ambiguous(wrapped(psycopg.errors.SerializationFailure(RESTART)))


# -- retries ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["40001", "XX000"], ids=["sqlstate-40001", "message-only"])
async def test_a_restart_transaction_error_from_the_server_runs_the_transaction_again(db: Database, state: str) -> None:
    runs = 0

    async def work(tx: Store) -> Any:
        nonlocal runs
        runs += 1
        created = await tx.tenants.create(f"retry-{state}-{runs}")
        if runs == 1:
            await tx.schema.run_script(raise_sqlstate(state, RESTART))
        return created

    tenant, _ = await db.transaction(work)
    assert (runs, db.retries) == (2, 1)
    names = [t.name for t in await db.transaction(lambda tx: tx.tenants.list_all())]
    assert names == [tenant.name] == [f"retry-{state}-2"]  # the failed run left nothing behind


# -- ambiguous commits ------------------------------------------------------------------------------


@pytest.fixture
def ambiguous_commit(db: Database, monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    """``ambiguous_commit(landed=True)``: the next COMMIT of a transaction that ran a statement
    containing ``writes`` commits (or, landed=False, rolls back) and then answers 40003 "result is
    ambiguous", as CockroachDB does when it loses track of a commit; other commits are left alone.
    A statement containing ``writes`` that runs alone (``Database.statement``, its own transaction)
    is the commit: it runs (or, landed=False, does not) and answers 40003. Only the first one fires."""
    dialect = db.engine.sync_engine.dialect
    real_commit, real_rollback = dialect.do_commit, dialect.do_rollback
    real_execute = _OneStatement.execute
    log: list[str] = []
    wrote: set[int] = set()  # DBAPI connections whose open transaction ran a matching statement

    def arm(*, landed: bool, writes: str = "INSERT INTO ") -> list[str]:
        def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if writes in statement:
                wrote.add(id(conn.connection))

        def do_commit(dbapi_connection: Any) -> None:
            if id(dbapi_connection) not in wrote or log:
                return real_commit(dbapi_connection)
            monkeypatch.setattr(dialect, "do_commit", real_commit)
            event.remove(db.engine.sync_engine, "before_cursor_execute", seen)
            (real_commit if landed else real_rollback)(dbapi_connection)
            log.append("landed" if landed else "rolled back")
            raise psycopg.errors.StatementCompletionUnknown(AMBIGUOUS)

        async def execute(self: _OneStatement, clause: Any, parameters: Any = None) -> Any:
            if log or writes not in driver_text(clause, dialect):
                return await real_execute(self, clause, parameters)
            if landed:
                await real_execute(self, clause, parameters)
            log.append("landed" if landed else "rolled back")
            raise psycopg.errors.StatementCompletionUnknown(AMBIGUOUS)

        event.listen(db.engine.sync_engine, "before_cursor_execute", seen)
        monkeypatch.setattr(dialect, "do_commit", do_commit)
        monkeypatch.setattr(_OneStatement, "execute", execute)
        return log

    return arm


def _submission(tenant_id: uuid.UUID, key: str | None = None) -> Any:
    from app.api.jobs import schemas

    body = schemas.JobIn(
        name="amb",
        target=schemas.TargetIn(type="queue", ref="work"),
        schedule=schemas.ScheduleIn(delay_seconds=3600),
        payload={"n": 1},
    )
    now = datetime.now(timezone.utc)
    return service.submission(body, Settings(), tenant_id, key, "fp" if key else None, now, None)


async def _jobs_of(db: Database, tenant_id: uuid.UUID) -> list[tuple[uuid.UUID, int]]:
    async def read(conn: Any) -> list[tuple[uuid.UUID, int]]:
        rows = await conn.execute(
            text(
                "SELECT j.job_id, (SELECT count(*) FROM due_index AS d WHERE d.job_id = j.job_id) AS due "
                "FROM jobs AS j WHERE j.tenant_id = :t"
            ),
            {"t": tenant_id},
        )
        return [(r.job_id, r.due) for r in rows]

    return await factories.raw(db, read)


async def tenant_on(db: Database, path: str) -> uuid.UUID:
    """A tenant whose submits take ``path``: "statement" (the insert alone, the common submit) or
    "transaction" (a critical tenant's, whose commit waits for the synchronous standby)."""
    t = await factories.tenant(db)
    if path == "transaction":
        await db.transaction(lambda tx: tx.durability.set_critical(t.tenant_id, True))
    return t.tenant_id


PATHS = pytest.mark.parametrize("path", ["statement", "transaction"])


@PATHS
@pytest.mark.parametrize("key", [None, "client-key-1"], ids=["no-key", "idempotency-key"])
async def test_a_submit_whose_commit_landed_ambiguously_is_read_back_not_inserted_again(
    db: Database, ambiguous_commit: Callable[..., list[str]], key: str | None, path: str
) -> None:
    tenant_id = await tenant_on(db, path)
    sub = _submission(tenant_id, key)
    log = ambiguous_commit(landed=True, writes="INSERT INTO jobs")
    writer = SubmitWriter(db)
    [outcome] = await writer.submit([sub])
    assert log == ["landed"]
    assert isinstance(outcome, Created) and (outcome.job_id, outcome.replayed) == (sub.job.job_id, False)
    assert await _jobs_of(db, tenant_id) == [(sub.job.job_id, 1)]  # one job, one due row: no duplicate


@PATHS
async def test_a_submit_whose_commit_did_not_land_is_stored_once_by_running_it_again(
    db: Database, ambiguous_commit: Callable[..., list[str]], path: str
) -> None:
    tenant_id = await tenant_on(db, path)
    sub = _submission(tenant_id)
    log = ambiguous_commit(landed=False, writes="INSERT INTO jobs")
    [outcome] = await SubmitWriter(db).submit([sub])
    assert log == ["rolled back"]
    assert isinstance(outcome, Created) and outcome.job_id == sub.job.job_id
    assert await _jobs_of(db, tenant_id) == [(sub.job.job_id, 1)]


@PATHS
async def test_an_ambiguous_commit_of_a_replayed_key_answers_the_earlier_job(
    db: Database, ambiguous_commit: Callable[..., list[str]], path: str
) -> None:
    tenant_id = await tenant_on(db, path)
    [first] = await SubmitWriter(db).submit([_submission(tenant_id, "k")])
    assert isinstance(first, Created)
    # Another batch: one new job and a retry of "k"; its commit lands, ambiguously.
    again, fresh = _submission(tenant_id, "k"), _submission(tenant_id, "k2")
    ambiguous_commit(landed=True, writes="INSERT INTO jobs")
    out = await SubmitWriter(db).submit([again, fresh])
    assert [(o.job_id, o.replayed) for o in out if isinstance(o, Created)] == [
        (first.job_id, True),
        (fresh.job.job_id, False),
    ]
    assert sorted(await _jobs_of(db, tenant_id)) == sorted([(first.job_id, 1), (fresh.job.job_id, 1)])


async def test_a_40003_from_a_statement_is_resolved_by_the_reader_too(db: Database) -> None:
    """Raised by the server (a DO block), before anything committed: the reader finds nothing and the
    work runs again, once."""
    runs: list[str] = []

    async def work(tx: Store) -> str:
        runs.append("work")
        created = await tx.tenants.create(f"amb-{runs.count('work')}")
        assert created is not None
        if runs == ["work"]:
            await tx.schema.run_script(raise_sqlstate("40003", AMBIGUOUS))
        return created[0].name

    async def landed(tx: Store) -> str | None:
        runs.append("read")
        tenant = await tx.tenants.get_by_name("amb-1")
        return tenant.name if tenant else None

    assert await db.transaction(work, on_ambiguous=landed) == "amb-2"
    assert runs == ["work", "read", "work"]


async def test_without_a_reader_an_ambiguous_commit_is_reported_and_not_repeated(
    db: Database, ambiguous_commit: Callable[..., list[str]]
) -> None:
    runs = 0

    async def work(tx: Store) -> None:
        nonlocal runs
        runs += 1
        await tx.tenants.create("only-once")

    ambiguous_commit(landed=True)
    with pytest.raises(errors.CommitAmbiguous) as raised:
        await db.transaction(work)
    assert isinstance(raised.value, errors.DatabaseUnavailable)  # HTTP 503, gRPC UNAVAILABLE
    assert runs == 1
    assert [t.name for t in await db.transaction(lambda tx: tx.tenants.list_all())] == ["only-once"]


# -- the driver path --------------------------------------------------------------------------------


def test_cockroachdb_urls_take_sqlalchemy_cockroachdb_over_psycopg() -> None:
    assert normalise_url("cockroachdb://u@h:26257/kairos?sslmode=verify-full").startswith("cockroachdb+psycopg://")
    assert normalise_url("cockroachdb+psycopg://u@h/kairos") == "cockroachdb+psycopg://u@h/kairos"
    engine = create_engine("cockroachdb://u@127.0.0.1:26257/kairos", isolation="REPEATABLE READ")
    assert (engine.dialect.name, engine.dialect.driver, engine.dialect.is_async) == ("cockroachdb", "psycopg", True)
    # sqlalchemy-cockroachdb refuses REPEATABLE READ; CockroachDB would run it as SERIALIZABLE anyway.
    assert isolation_for("cockroachdb", "REPEATABLE READ") == "SERIALIZABLE"
    assert isolation_for("cockroachdb", "READ COMMITTED") == "READ COMMITTED"
    assert isolation_for("postgresql", "REPEATABLE READ") == "REPEATABLE READ"


@pytest.fixture
async def cockroach_dialect_db(database_url: str) -> AsyncIterator[Database]:
    """The production driver path (sqlalchemy-cockroachdb over psycopg), pointed at PostgreSQL."""
    database = Database(create_engine(cockroach_url(database_url), pool_size=2))
    yield database
    await database.close()


async def test_the_cockroach_driver_path_runs_transactions_and_asks_for_follower_reads(
    cockroach_dialect_db: Database,
) -> None:
    db = cockroach_dialect_db
    assert db.dialect == "cockroachdb"
    t = await factories.tenant(db, "via-crdb-dialect")
    # A REPEATABLE READ transaction (what history reads ask for) is asked of CockroachDB as SERIALIZABLE.
    got = await db.transaction(lambda tx: tx.tenants.get(t.tenant_id), isolation="REPEATABLE READ")
    assert got is not None and got.name == "via-crdb-dialect"

    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement.strip())

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        # PostgreSQL does not know AS OF SYSTEM TIME: the read fails, after sending it first.
        with pytest.raises(errors.StoreFailure):
            await db.read(lambda tx: tx.tenants.get(t.tenant_id))
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
    assert sent and sent[0] == "SET TRANSACTION AS OF SYSTEM TIME follower_read_timestamp()"


async def test_reads_are_read_only_even_on_the_primary(db: Database) -> None:
    t = await factories.tenant(db)
    with pytest.raises(errors.StoreFailure) as refused:
        await db.read(lambda tx: tx.tenants.set_quota(t.tenant_id, weight=7))
    assert refused.value.sqlstate == "25006"  # read_only_sql_transaction
    assert (await db.transaction(lambda tx: tx.tenants.get(t.tenant_id))).weight == 1


async def test_a_read_that_finds_nothing_where_staleness_could_explain_it_stays_on_the_primary(db: Database) -> None:
    """Without a replica the primary's answer is final: fresh_if does not ask twice."""
    runs = 0

    async def work(tx: Store) -> None:
        nonlocal runs
        runs += 1
        raise errors.JobNotFound()

    with pytest.raises(errors.JobNotFound):
        await db.read(work, fresh_if=(errors.JobNotFound,))
    assert runs == 1
