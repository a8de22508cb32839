"""Engine factory and the one transaction helper.

Reconnection: a dead connection is found before use (``pool_pre_ping``) or by the statement that
fails on it; a disconnect invalidates every pooled connection at once, so after a database restart
each process pays one failed statement and then works on fresh connections. The failure leaves as
``DatabaseUnavailable``, which every duty loop logs and survives (app.duties); nothing here waits
for the database to come back.

The executor's hot calls run through ``Database.statement`` instead: one statement in autocommit on
psycopg's own pool (psycopg_pool), connected as the engine connects: one round trip instead of
four (pre-ping, BEGIN, statement, COMMIT) and no SQLAlchemy result layer, a third less client CPU
per lease and completion (loadtest/db_call_probe.py). Its connections are not pinged before use:
a lost one fails its call, and every idle one is tested before that error leaves, the same
one-failure-per-restart as the engine.

Bounds: with ``statement_timeout_s`` the server ends a statement that runs longer, and a session
left idle inside a transaction for longer (a paused client holding row locks); the client abandons
a transaction that got no answer within twice that (a server or network that does not answer at
all cannot be timed out by the server), closing its connection. A stuck database therefore costs a
caller ``DatabaseUnavailable`` after a bounded time, never a task parked forever.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import msgspec
import psycopg
from psycopg.rows import namedtuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import TextClause
from sqlalchemy.engine import Dialect, Engine, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

from app import errors, observability
from app.config import Settings
from app.store.queries import COCKROACH, driver_text
from app.store.seam import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

_decode_json = msgspec.json.decode


def json_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """JSON and JSONB values as Python objects, as ``json.loads`` reads them: msgspec's decoder (2.6 us
    for ``{}`` against 0.14 us; a herd leases a payload per execution), and ``json.loads`` for the
    values msgspec refuses, numbers beyond a float's range (``1e400``, which JSONB keeps: inf)."""
    try:
        return _decode_json(data)
    except msgspec.DecodeError:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)


# Every connection of this process (the engines' and Database.statement's) reads JSON through it.
set_json_loads(json_loads)

# serialization_failure, deadlock_detected: the whole transaction may simply be run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
# idle_in_transaction_session_timeout ended the session: the database was fine, this client was not.
IDLE_IN_TRANSACTION_TIMEOUT = "25P03"
# lock_timeout ran out (DDL that waits for its locks briefly: migrations, the history partitions' drop).
LOCK_NOT_AVAILABLE = "55P03"
# A connection attempt that has not succeeded in this long counts as a failure (libpq connect_timeout).
CONNECT_TIMEOUT_S = 5
# ``statement``'s pool keeps this many connections open (at most the engine's pool size), idle or not:
# a burst that has to open its connections pays each one's start and first plans (about 14 ms of its
# backend, loadtest/warmup_probe.py) at the worst moment; open before it, they start and begin planning
# the lease during the idle long polls (docs/performance.md, "Database calls and settings").
DIRECT_POOL_MIN = 4
# A client-side bound on a transaction is this many times the statement timeout (several statements).
TRANSACTION_TIMEOUT_FACTOR = 2.0


@dataclass(frozen=True)
class RetryConfig:
    attempts: int = 12
    base_s: float = 0.005
    max_s: float = 0.5


def sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(exc, "sqlstate", None)


# CockroachDB's client-side retry errors all carry 40001 and a message that begins "restart
# transaction" (transaction-retry-error-reference); the message alone is matched too, since some
# drivers and proxies lose the code on the way. An ambiguous commit is 40003 "result is ambiguous":
# the transaction may or may not have committed (cockroachlabs.com/docs/stable/common-errors).
COCKROACH_RETRY_MESSAGE = "restart transaction"
AMBIGUOUS_SQLSTATE = "40003"
AMBIGUOUS_MESSAGE = "result is ambiguous"


def _message(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).lower()


def retryable(exc: BaseException) -> bool:
    """Running the whole transaction again may succeed: a serialization failure or deadlock
    (PostgreSQL and CockroachDB), or one of CockroachDB's "restart transaction" errors."""
    return sqlstate(exc) in RETRYABLE_SQLSTATES or COCKROACH_RETRY_MESSAGE in _message(exc)


def ambiguous(exc: BaseException) -> bool:
    """The commit's outcome is unknown (CockroachDB lost track of it): it may have landed."""
    return sqlstate(exc) == AMBIGUOUS_SQLSTATE or AMBIGUOUS_MESSAGE in _message(exc)


# sqlalchemy-cockroachdb accepts only these; CockroachDB itself runs REPEATABLE READ as SERIALIZABLE
# unless the cluster enables it (read-committed / transactions docs), so that is what it is asked for.
COCKROACH_ISOLATION_LEVELS = frozenset({"SERIALIZABLE", "READ COMMITTED", "AUTOCOMMIT"})


def isolation_for(dialect: str, isolation: str) -> str:
    """``isolation`` as ``dialect`` can be asked for it."""
    if dialect == COCKROACH and isolation.upper() not in COCKROACH_ISOLATION_LEVELS:
        return "SERIALIZABLE"
    return isolation


def translate(exc: DBAPIError | psycopg.Error) -> errors.KairosError:
    """The Kairos error for a database error (SQLAlchemy's, or psycopg's from ``Database.statement``)
    that re-running the transaction will not cure."""
    state = sqlstate(exc)
    detail = (str(getattr(exc, "orig", exc)).splitlines() or [type(exc).__name__])[0]
    if state is None and isinstance(
        exc, (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
    ):
        return errors.DatabaseUnavailable(detail)
    if state is not None and state[:2] in ("08", "57", "53"):  # connection lost, shutdown or cancel, resources
        return errors.DatabaseUnavailable(detail)  # 57014 is statement_timeout: a slow database
    if state == IDLE_IN_TRANSACTION_TIMEOUT:
        return errors.DatabaseUnavailable(detail)
    if state is not None and state[:2] == "23":  # integrity constraint: a concurrent writer got there first
        return errors.StoreConflict(detail, sqlstate=state)
    if state is not None and state[:2] == "22":  # data exception: a value the schema cannot hold
        return errors.StoreRejected(detail, sqlstate=state)
    return errors.StoreFailure(f"database error {state or 'unknown'}: {detail}", sqlstate=state)


def normalise_url(url: str) -> str:
    """Pick the psycopg (async) driver for postgresql:// and cockroachdb:// URLs."""
    for scheme, driver in (
        ("postgresql://", "postgresql+psycopg://"),
        ("postgres://", "postgresql+psycopg://"),
        ("cockroachdb://", "cockroachdb+psycopg://"),
    ):
        if url.startswith(scheme):
            return driver + url[len(scheme) :]
    return url


# Every session runs in UTC, whatever the server's default (pgserver's is "Etc/UTC"): psycopg then loads a
# timestamptz as a ``timezone.utc`` datetime, 0.29 us a value against 0.64-0.70 us through zoneinfo for
# any other zone name (docs/performance.md, "Database calls and settings"), and every time Kairos reads back
# is in UTC, as its idempotency keys write them. Lower case: CockroachDB looks the name up as written.
SESSION_TIME_ZONE = "-c timezone=UTC"


def session_options(url: str, statement_timeout_s: float) -> str:
    """The libpq ``options`` of each connection: the URL's own, the session time zone (UTC, after the
    URL's own, so it wins), and the two server-side bounds.

    Set at connect time rather than with SET, so a reconnect can never lose them; PostgreSQL and
    CockroachDB both read ``-c name=value`` here and know all three variables.
    """
    own = make_url(normalise_url(url)).query.get("options")
    parts = [own] if isinstance(own, str) and own else []
    parts.append(SESSION_TIME_ZONE)
    if statement_timeout_s > 0:
        ms = max(1, round(statement_timeout_s * 1000))
        parts += [f"-c statement_timeout={ms}", f"-c idle_in_transaction_session_timeout={ms}"]
    return " ".join(parts)


def connect_args(url: str, statement_timeout_s: float = 0.0, application_name: str = "") -> dict[str, Any]:
    """psycopg's connection arguments beside ``url``: the connect timeout, ``session_options`` and
    ``application_name`` (how the connections are named in ``pg_stat_activity``)."""
    args: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S, "options": session_options(url, statement_timeout_s)}
    if application_name:
        args["application_name"] = application_name[:63]
    return args


def create_engine(
    url: str,
    *,
    isolation: str = "SERIALIZABLE",
    pool_size: int = 10,
    statement_timeout_s: float = 0.0,
    application_name: str = "",
) -> AsyncEngine:
    """An engine for ``url``; ``statement_timeout_s`` > 0 bounds statements and idle transactions on the
    server; ``application_name`` names the connections in ``pg_stat_activity``."""
    args = connect_args(url, statement_timeout_s, application_name)
    driver_url = normalise_url(url)
    engine = create_async_engine(
        driver_url,
        isolation_level=isolation_for(COCKROACH if driver_url.startswith(COCKROACH) else "", isolation),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,  # a connection the server dropped (restart, idle timeout) is replaced before use
        pool_recycle=1800,
        connect_args=args,
    )
    _ENGINE_ARGS[engine.sync_engine] = args  # Database.statement's connections get the same
    return engine


# The connection arguments each engine of create_engine was made with (Database.statement reuses them).
_ENGINE_ARGS: weakref.WeakKeyDictionary[Engine, dict[str, Any]] = weakref.WeakKeyDictionary()


class _Rows:
    """A statement's rows as the store's table classes read SQLAlchemy results: ``keys()``, iteration
    (rows unpack and have attributes), ``first``, ``scalar_one``."""

    __slots__ = ("_keys", "_rows")

    def __init__(self, keys: tuple[str, ...], rows: list[Any]) -> None:
        self._keys, self._rows = keys, rows

    def keys(self) -> tuple[str, ...]:
        return self._keys

    def __iter__(self) -> Any:
        return iter(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise RuntimeError(f"expected one row, got {len(self._rows)}")
        return self._rows[0][0]


class _OneStatement:
    """The connection ``Database.statement``'s work sees: runs one ``q()`` statement on psycopg."""

    __slots__ = ("_conn", "_dialect", "_ran")

    def __init__(self, conn: psycopg.AsyncConnection[Any], dialect: Dialect) -> None:
        self._conn, self._dialect, self._ran = conn, dialect, False

    async def execute(self, clause: TextClause, parameters: dict[str, Any] | None = None) -> _Rows:
        if self._ran:
            raise RuntimeError("Database.statement runs one statement: use Database.transaction for more")
        self._ran = True
        cur = self._conn.cursor(row_factory=namedtuple_row)
        await cur.execute(driver_text(clause, self._dialect), parameters or {})
        if cur.description is None:
            return _Rows((), [])
        return _Rows(tuple(c.name for c in cur.description), await cur.fetchall())


class Database:
    """An engine plus the retrying transaction runner every write goes through."""

    def __init__(
        self,
        engine: AsyncEngine,
        retry: RetryConfig = RetryConfig(),
        *,
        transaction_timeout_s: float = 0.0,
        read_engine: AsyncEngine | None = None,
    ) -> None:
        self.engine = engine
        # KAIROS_READ_DATABASE_URL (a streaming standby): where ``read`` goes; None: the primary.
        self.read_engine = read_engine
        self.retry = retry
        self.retries = 0  # transactions re-run after 40001/40P01, for metrics and tests
        # Client-side bound on one run of a transaction's work, connection checkout included; 0: none.
        self.transaction_timeout_s = transaction_timeout_s
        # ``statement``'s own connections: psycopg's pool, opened on first use, one per event loop (a
        # process has one; a test may drive the API in a client's loop and the executor in its own).
        self._direct: dict[asyncio.AbstractEventLoop, AsyncConnectionPool[psycopg.AsyncConnection[Any]]] = {}
        self._direct_opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    @classmethod
    def from_settings(cls, settings: Settings, url: str, *, name: str = "", bounded: bool = True) -> Database:
        """The tier's database: ``name`` (the tier) labels its connections; ``bounded`` False leaves out the
        statement timeout (migrations, whose DDL may legitimately run long)."""
        timeout_s = settings.db_statement_timeout_s if bounded else 0.0
        engine = create_engine(
            url,
            isolation=settings.db_isolation,
            pool_size=settings.db_pool_size,
            statement_timeout_s=timeout_s,
            application_name=f"kairos-{name}:{os.getpid()}" if name else "",
        )
        reader = None
        if settings.read_database_url:  # a hot standby: REPEATABLE READ, since it refuses SERIALIZABLE
            reader = create_engine(
                settings.read_database_url,
                isolation="REPEATABLE READ",
                pool_size=settings.db_pool_size,
                statement_timeout_s=timeout_s,
                application_name=f"kairos-{name}-read:{os.getpid()}" if name else "",
            )
        return cls(engine, transaction_timeout_s=timeout_s * TRANSACTION_TIMEOUT_FACTOR, read_engine=reader)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def transaction(
        self,
        work: Callable[[Store], Awaitable[T]],
        *,
        isolation: str | None = None,
        on_ambiguous: Callable[[Store], Awaitable[T | None]] | None = None,
        read_only: bool = False,
        _primary: bool = False,
    ) -> T:
        """Run ``work`` in one transaction, re-running it whole on 40001/40P01 (and CockroachDB's
        "restart transaction" errors). An ambiguous commit (CockroachDB 40003) is resolved with
        ``on_ambiguous`` (see ``_after_ambiguous_commit``), never by running ``work`` blindly again.
        ``read_only``: see ``read``.

        ``work`` must be safe to run again: it gets a fresh ``Store`` each time and must not keep
        state from a failed run. Any other database error leaves as an ``app.errors`` exception
        (``translate``), so callers never see SQLAlchemy or psycopg.
        """
        return await self._retrying(
            lambda: self._run(work, isolation, read_only, _primary),
            lambda exc: self._after_ambiguous_commit(work, isolation, on_ambiguous, exc),
        )

    async def statement(self, work: Callable[[Store], Awaitable[T]]) -> T:
        """Run ``work``, which runs exactly one statement, as that statement alone: on psycopg directly,
        in autocommit, so the statement is its own transaction (PostgreSQL and CockroachDB alike) and
        costs one round trip: no pool pre-ping, no BEGIN, no COMMIT, no SQLAlchemy. The executor's hot
        calls (lease, complete, heartbeat) come here; they are guarded UPDATEs, safe at READ COMMITTED
        (PostgreSQL's default; CockroachDB runs them SERIALIZABLE and retries them itself).

        Retries, bounds and errors are ``transaction``'s: re-run whole on 40001/40P01, a client-side
        bound of ``transaction_timeout_s``, ``app.errors`` out. A second statement in ``work`` fails
        (RuntimeError) before it runs. An ambiguous result (CockroachDB) raises CommitAmbiguous: the
        statements that come here are fenced, so the caller's retry is safe.
        """

        async def ambiguous_result(exc: Exception) -> T:
            raise errors.CommitAmbiguous(str(exc).splitlines()[0]) from exc

        return await self._retrying(lambda: self._run_direct(work), ambiguous_result)

    async def outside_transaction(self, script: str) -> None:
        """One DDL statement that may not run in a transaction block (CREATE INDEX CONCURRENTLY), in
        autocommit on its own connection; migrations only. Run again after a deadlock (two processes
        building the same index CONCURRENTLY: PostgreSQL aborts one; the statements are idempotent)."""
        delay = self.retry.base_s
        for attempt in range(1, self.retry.attempts + 1):
            try:
                async with self.engine.connect() as conn:
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                    await Store(conn).schema.run_script(script)
                return
            except DBAPIError as exc:
                if not retryable(exc) or attempt == self.retry.attempts:
                    raise translate(exc) from exc
                await asyncio.sleep(random.uniform(0, delay))
                delay = min(self.retry.max_s, delay * 2)

    async def _retrying(self, once: Callable[[], Awaitable[T]], after_ambiguous: Callable[[Any], Awaitable[T]]) -> T:
        delay = self.retry.base_s
        for attempt in range(1, self.retry.attempts + 1):
            bound = asyncio.timeout(self.transaction_timeout_s or None)
            try:
                async with bound:
                    return await once()
            except TimeoutError as exc:
                if not bound.expired():
                    raise
                # Cancelled in flight: psycopg cancels the statement or closes the connection, so the
                # pool never hands out a connection in an unknown state.
                raise errors.DatabaseUnavailable(
                    f"no answer from the database within {self.transaction_timeout_s:g} s"
                ) from exc
            except (DBAPIError, psycopg.Error) as exc:
                if ambiguous(exc):
                    return await after_ambiguous(exc)
                if not retryable(exc):
                    failure = translate(exc)
                    if isinstance(exc, psycopg.Error) and isinstance(failure, errors.DatabaseUnavailable):
                        await self._check_direct()  # a lost connection may not be the only one
                    raise failure from exc
                if attempt == self.retry.attempts:
                    raise errors.TransactionRetriesExhausted() from exc
                self.retries += 1
                observability.tx_retries.add(1)
                # Full jitter: concurrent losers spread out instead of colliding again.
                await asyncio.sleep(random.uniform(0, delay))
                delay = min(self.retry.max_s, delay * 2)
            except PoolTimeout as exc:
                raise errors.DatabaseUnavailable("no database connection free in the pool") from exc
        raise AssertionError("unreachable")

    async def _direct_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        loop = asyncio.get_running_loop()
        if (pool := self._direct.get(loop)) is None:
            async with self._direct_opening.setdefault(loop, asyncio.Lock()):
                if (pool := self._direct.get(loop)) is None:
                    # Connected exactly as the engine connects: its dialect's reading of the URL (multi-host
                    # lists included), then the arguments create_engine gave it.
                    _, from_url = self.engine.dialect.create_connect_args(self.engine.url)
                    # psycopg's own prepare_threshold (the fifth use) stays: preparing at first use saved
                    # nothing measurable on a new connection (loadtest/warmup_probe.py).
                    args = {**from_url, **_ENGINE_ARGS.get(self.engine.sync_engine, {}), "autocommit": True}
                    pool = AsyncConnectionPool(
                        "",
                        kwargs=args,
                        # As many as the engine may open, overflow included; a call waits for a connection
                        # (or the database) as long as a connection attempt may take, then fails.
                        min_size=min(DIRECT_POOL_MIN, self._engine_pool_size()),
                        max_size=self._engine_pool_size() * 2,
                        timeout=CONNECT_TIMEOUT_S,
                        reconnect_timeout=CONNECT_TIMEOUT_S,
                        name=f"kairos-direct:{os.getpid()}",
                        open=False,
                    )
                    await pool.open(wait=False)
                    self._direct[loop] = pool
        return pool

    def _engine_pool_size(self) -> int:
        pool = self.engine.pool
        return max(1, pool.size()) if isinstance(pool, QueuePool) else 1

    async def _check_direct(self) -> None:
        """After a lost connection: test every idle direct connection before the error leaves (what
        ``pool_pre_ping`` does for the engine, without a ping per use), so a restarted database costs
        one failed call. Bounded: a server that does not answer at all leaves the rest to their users."""
        if (pool := self._direct.get(asyncio.get_running_loop())) is not None:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await pool.check()
            except TimeoutError:
                log.warning("checking the direct connections took longer than %s s", CONNECT_TIMEOUT_S)

    async def _run_direct(self, work: Callable[[Store], Awaitable[T]]) -> T:
        pool = await self._direct_pool()
        async with pool.connection() as conn:
            return await work(Store(cast(AsyncConnection, _OneStatement(conn, self.engine.dialect))))

    async def _run(
        self,
        work: Callable[[Store], Awaitable[T]],
        isolation: str | None,
        read_only: bool = False,
        primary: bool = False,
    ) -> T:
        replica = read_only and not primary
        engine = (self.read_engine or self.engine) if replica else self.engine
        async with engine.connect() as conn:
            if isolation:
                await conn.execution_options(isolation_level=isolation_for(engine.dialect.name, isolation))
            if read_only:
                await conn.execution_options(postgresql_readonly=True)  # BEGIN READ ONLY: a write fails (25006)
            async with conn.begin():
                store = Store(conn)
                if replica and self.read_engine is None and engine.dialect.name == COCKROACH:
                    await store.schema.follower_read()
                return await work(store)

    async def _after_ambiguous_commit(
        self,
        work: Callable[[Store], Awaitable[T]],
        isolation: str | None,
        on_ambiguous: Callable[[Store], Awaitable[T | None]] | None,
        exc: DBAPIError,
    ) -> T:
        """The commit may have landed. ``on_ambiguous`` reads, in a new transaction, whether it did
        (by keys the work chose before it first ran) and returns the work's result if so, None if
        not; only then is the work run again. Reading a key the ambiguous transaction wrote makes
        CockroachDB settle that transaction first (a reader that meets its intent resolves it), so
        the answer cannot change afterwards. Without ``on_ambiguous`` the caller is told
        (CommitAmbiguous) rather than the work being repeated."""
        observability.tx_ambiguous.add(1)
        if on_ambiguous is None:
            raise errors.CommitAmbiguous(str(getattr(exc, "orig", exc)).splitlines()[0]) from exc
        log.warning("commit result ambiguous; reading whether it landed", extra={"error": str(exc.orig)[:200]})
        found = await self.transaction(on_ambiguous, isolation="READ COMMITTED")
        if found is not None:
            return found
        return await self.transaction(work, isolation=isolation, on_ambiguous=on_ambiguous)

    async def read(
        self,
        work: Callable[[Store], Awaitable[T]],
        *,
        isolation: str = "REPEATABLE READ",
        fresh_if: tuple[type[Exception], ...] = (),
    ) -> T:
        """Run ``work`` in a read-only transaction where reads that tolerate a few seconds of
        staleness belong (history, attempts, dead letters, the dashboard): on the read database
        (KAIROS_READ_DATABASE_URL, a streaming standby) when there is one; on CockroachDB without
        one, at ``follower_read_timestamp()`` so the nearest replica answers; else on the primary.
        Read-only everywhere: a write in ``work`` fails and changes nothing. REPEATABLE READ by
        default (one snapshot for the whole read; a hot standby refuses SERIALIZABLE).

        ``fresh_if``: errors a stale read may cause (a job submitted a moment ago not found yet) are
        answered by the primary instead."""
        try:
            return await self.transaction(work, isolation=isolation, read_only=True)
        except fresh_if:
            if self.read_engine is None and self.dialect != COCKROACH:
                raise  # it was the primary already
            return await self.transaction(work, isolation=isolation, read_only=True, _primary=True)

    async def close(self) -> None:
        # This loop's pool is closed; one opened in a loop that has ended since cannot be (its tasks died
        # with it) and goes with its connections' sockets.
        pools, self._direct, self._direct_opening = self._direct, {}, {}
        if (pool := pools.get(asyncio.get_running_loop())) is not None:
            await pool.close()
        await self.engine.dispose()
        if self.read_engine is not None:
            await self.read_engine.dispose()
