"""The one seam between the tiers and the database.

A transaction's work receives a ``Store``: one attribute per table (``store.jobs``,
``store.executions``, ``store.dispatch`` ...), one typed method per named statement of
``sql/queries``, frozen dataclasses out. Modelled on river's ``riverdriver.Executor`` and Oban's
``Engine``; grouped by table rather than flat because the catalogue has some seventy statements
and a reader looks for "what can I do to executions", the way ``sql/queries/<table>.sql`` is
laid out. Database errors never cross it: ``Database.transaction`` translates them into
``app.errors`` (see ``translate``). It holds production's tables only: code with statements of its
own (the failure drills) binds its tables to the same transaction with ``Store.bind``.
"""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.attempts import Attempts
from app.store.dispatch import Dispatch
from app.store.durability import Durability
from app.store.executions import Executions
from app.store.jobs import Jobs
from app.store.oidc_keys import OidcKeys
from app.store.partitions import Partitions
from app.store.planner_statistics import PlannerStatistics
from app.store.pools import Pools
from app.store.retention import Retention
from app.store.schema import Schema
from app.store.shard_leases import ShardLeases
from app.store.stats import Stats
from app.store.table import Table
from app.store.tenants import Tenants

T = TypeVar("T", bound=Table)


class Store:
    """Every statement one transaction may run, bound to its connection."""

    __slots__ = (
        "_conn",
        "attempts",
        "dispatch",
        "durability",
        "executions",
        "jobs",
        "oidc_keys",
        "partitions",
        "planner_statistics",
        "pools",
        "retention",
        "schema",
        "shard_leases",
        "stats",
        "tenants",
    )

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
        self.attempts = Attempts(conn)
        self.dispatch = Dispatch(conn)
        self.durability = Durability(conn)
        self.executions = Executions(conn)
        self.jobs = Jobs(conn)
        self.oidc_keys = OidcKeys(conn)
        self.partitions = Partitions(conn)
        self.pools = Pools(conn)
        self.retention = Retention(conn)
        self.schema = Schema(conn)
        self.shard_leases = ShardLeases(conn)
        self.planner_statistics = PlannerStatistics(conn)
        self.stats = Stats(conn)
        self.tenants = Tenants(conn)

    def bind(self, table: type[T]) -> T:
        """``table``, a table class kept outside the production seam (the drills' reads,
        app/drill/reads.py), bound to this transaction's connection."""
        return table(self._conn)
