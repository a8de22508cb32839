"""The only code that talks to the database.

Every statement is a named block in ``sql/queries/<table>.sql`` (loaded once by ``queries``).
The table modules here (``jobs``, ``tenants``, ``executions`` ...) each hold one class of typed
methods over those statements, returning frozen dataclasses; ``seam.Store`` bundles them for one
transaction. ``Database.transaction`` hands a ``Store`` to the work it runs, retries
serialization failures (40001) and deadlocks (40P01) with jittered, bounded backoff on
PostgreSQL and CockroachDB alike, and translates every other database error into ``app.errors``,
so nothing above this package sees SQLAlchemy or psycopg.
"""

from app.store.db import Database
from app.store.seam import Store

__all__ = ["Database", "Store"]
