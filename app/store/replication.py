"""Streaming-replication state of a PostgreSQL server, read by the local drills (app/drill).

PostgreSQL only: CockroachDB replicates by itself and has no standbys to ask about.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.store.queries import q
from app.store.table import Table


@dataclass(frozen=True)
class StandbyState:
    state: str  # startup | catchup | streaming | backup | stopping
    sync_state: str  # async | potential | sync | quorum
    flush_lag_bytes: int | None  # WAL the standby has not made durable yet
    replay_lag_bytes: int | None  # WAL it has not applied yet


class Replication(Table):
    """The replication statements of one transaction."""

    async def standby(self, name: str) -> StandbyState | None:
        row = (await self._conn.execute(q("ReplicationStandbyGet"), {"name": name})).first()
        if row is None:
            return None
        return StandbyState(state=row.state, sync_state=row.sync_state,
                            flush_lag_bytes=row.flush_lag_bytes, replay_lag_bytes=row.replay_lag_bytes)

    async def in_recovery(self) -> bool:
        return bool((await self._conn.execute(q("ReplicationInRecovery"))).scalar_one())

    async def wal_position(self) -> int | None:
        """Bytes of WAL this server has (written on a primary, received on a standby); None: nothing yet."""
        text = (await self._conn.execute(q("ReplicationWalPosition"))).scalar_one()
        return lsn_bytes(text) if text else None


def lsn_bytes(lsn: str) -> int:
    """``16/B374D848`` -> its byte position."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)
