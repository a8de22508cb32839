"""The base of the store's table classes: the connection of one transaction."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection


class Table:
    """Statements over one table (or one concern), bound to the connection of one transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
