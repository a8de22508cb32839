"""The statements that look after the schema itself: the migrations ledger and the ping."""

from __future__ import annotations

from app.store.queries import q
from app.store.table import Table


class Schema(Table):
    """The schema statements of one transaction."""

    async def ping(self) -> None:
        await self._conn.execute(q("HealthPing"))

    async def create_ledger(self) -> None:
        await self._conn.execute(q("SchemaMigrationsCreate"))

    async def applied(self) -> dict[str, str]:
        """version -> checksum of every migration applied."""
        return {r.version: r.checksum for r in await self._conn.execute(q("SchemaMigrationsList"))}

    async def claim(self, version: str, checksum: str) -> bool:
        """Record ``version`` as applied in this transaction; False when it already was."""
        row = (await self._conn.execute(q("SchemaMigrationClaim"), {"version": version, "checksum": checksum})).first()
        return row is not None

    async def run_script(self, script: str) -> None:
        """A migration file as written: DDL, several statements, no parameters."""
        await self._conn.exec_driver_sql(script)

    async def server_version(self) -> tuple[str, str]:
        """The server's version string and the database this connection uses."""
        row = (await self._conn.execute(q("ServerVersion"))).one()
        return str(row.version), str(row.database)

    async def cluster_regions(self) -> list[str]:
        """CockroachDB: the regions of the cluster's nodes, sorted."""
        return [str(r.region) for r in await self._conn.execute(q("OverlayClusterRegions"))]

    async def follower_read(self) -> None:
        """CockroachDB: read this read-only transaction at follower_read_timestamp() (its first statement)."""
        await self._conn.execute(q("TransactionFollowerRead"))
