"""Engine factory and the one transaction helper."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app import errors, observability
from app.config import Settings
from app.store.seam import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

# serialization_failure, deadlock_detected: the whole transaction may simply be run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


@dataclass(frozen=True)
class RetryConfig:
    attempts: int = 12
    base_s: float = 0.005
    max_s: float = 0.5


def sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(exc, "sqlstate", None)


def translate(exc: DBAPIError) -> errors.KairosError:
    """The Kairos error for a database error that re-running the transaction will not cure."""
    state = sqlstate(exc)
    detail = str(getattr(exc, "orig", exc)).splitlines()[0]
    if state is None and isinstance(exc, (OperationalError, InterfaceError)):
        return errors.DatabaseUnavailable(detail)
    if state is not None and state[:2] in ("08", "57", "53"):  # connection lost, shutdown or cancel, resources
        return errors.DatabaseUnavailable(detail)
    if state is not None and state[:2] == "23":  # integrity constraint: a concurrent writer got there first
        return errors.StoreConflict(detail, sqlstate=state)
    if state is not None and state[:2] == "22":  # data exception: a value the schema cannot hold
        return errors.StoreRejected(detail, sqlstate=state)
    return errors.StoreFailure(f"database error {state or 'unknown'}: {detail}", sqlstate=state)


def normalise_url(url: str) -> str:
    """Pick the psycopg (async) driver for postgresql:// and cockroachdb:// URLs."""
    for scheme, driver in (("postgresql://", "postgresql+psycopg://"), ("postgres://", "postgresql+psycopg://"),
                           ("cockroachdb://", "cockroachdb+psycopg://")):
        if url.startswith(scheme):
            return driver + url[len(scheme):]
    return url


def create_engine(url: str, *, isolation: str = "SERIALIZABLE", pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(
        normalise_url(url),
        isolation_level=isolation,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
    )


class Database:
    """An engine plus the retrying transaction runner every write goes through."""

    def __init__(self, engine: AsyncEngine, retry: RetryConfig = RetryConfig()) -> None:
        self.engine = engine
        self.retry = retry
        self.retries = 0  # transactions re-run after 40001/40P01, for metrics and tests

    @classmethod
    def from_settings(cls, settings: Settings, url: str) -> Database:
        return cls(create_engine(url, isolation=settings.db_isolation, pool_size=settings.db_pool_size))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def transaction(
        self,
        work: Callable[[Store], Awaitable[T]],
        *,
        isolation: str | None = None,
    ) -> T:
        """Run ``work`` in one transaction, re-running it whole on 40001/40P01.

        ``work`` must be safe to run again: it gets a fresh ``Store`` each time and must not keep
        state from a failed run. Any other database error leaves as an ``app.errors`` exception
        (``translate``), so callers never see SQLAlchemy or psycopg.
        """
        delay = self.retry.base_s
        for attempt in range(1, self.retry.attempts + 1):
            try:
                async with self.engine.connect() as conn:
                    if isolation:
                        await conn.execution_options(isolation_level=isolation)
                    async with conn.begin():
                        return await work(Store(conn))
            except DBAPIError as exc:
                if sqlstate(exc) not in RETRYABLE_SQLSTATES:
                    raise translate(exc) from exc
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

    async def close(self) -> None:
        await self.engine.dispose()
