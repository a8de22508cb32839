"""The one seam between the tiers and the database.

A transaction's work receives a ``Store``: one attribute per table (``store.jobs``,
``store.executions``, ``store.dispatch`` ...), one typed method per named statement of
``sql/queries``, frozen dataclasses out. Modelled on river's ``riverdriver.Executor`` and Oban's
``Engine``; grouped by table rather than flat because the catalogue has some seventy statements
and a reader looks for "what can I do to executions", the way ``sql/queries/<table>.sql`` is
laid out. Database errors never cross it: ``Database.transaction`` translates them into
``app.errors`` (see ``translate``).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.attempts import Attempts
from app.store.dispatch import Dispatch
from app.store.drill import Drill
from app.store.durability import Durability
from app.store.executions import Executions
from app.store.jobs import Jobs
from app.store.pools import Pools
from app.store.replication import Replication
from app.store.retention import Retention
from app.store.schema import Schema
from app.store.shard_leases import ShardLeases
from app.store.statistics import Statistics
from app.store.stats import Stats
from app.store.tenants import Tenants


class Store:
    """Every statement one transaction may run, bound to its connection."""

    __slots__ = ("attempts", "dispatch", "drill", "durability", "executions", "jobs", "pools", "schema",
                 "shard_leases", "statistics",
                 "replication", "retention", "stats",
                 "tenants")

    def __init__(self, conn: AsyncConnection) -> None:
        self.attempts = Attempts(conn)
        self.dispatch = Dispatch(conn)
        self.drill = Drill(conn)
        self.durability = Durability(conn)
        self.executions = Executions(conn)
        self.jobs = Jobs(conn)
        self.pools = Pools(conn)
        self.retention = Retention(conn)
        self.replication = Replication(conn)
        self.schema = Schema(conn)
        self.shard_leases = ShardLeases(conn)
        self.statistics = Statistics(conn)
        self.stats = Stats(conn)
        self.tenants = Tenants(conn)
