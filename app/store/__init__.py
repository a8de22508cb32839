"""The only code that talks to the database.

Model: every statement is a named block in ``sql/queries/<table>.sql`` (loaded once by
``queries``); each table module here (``jobs``, ``tenants``, ``executions`` ...) wraps those
statements in typed async functions that take an ``AsyncConnection`` and return frozen
dataclasses, so services never see SQLAlchemy rows or psycopg errors. Writes run inside
``Database.transaction``, which retries serialization failures (40001) and deadlocks (40P01)
with jittered, bounded backoff on PostgreSQL and CockroachDB alike.
"""
