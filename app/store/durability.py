"""Per-tenant durability, and what an ambiguous commit needs to be resolved.

A tenant marked critical (``tenants.critical``) has its submits committed with
``synchronous_commit = remote_apply`` for that transaction: on PostgreSQL with a synchronous standby
the COMMIT returns once the standby has applied it, so a failover to that standby loses no
acknowledged job of the tenant. On CockroachDB every commit is replicated by consensus before it
returns, so there is nothing to ask for and nothing is sent.

A commit whose outcome is unknown (CockroachDB's 40003 "result is ambiguous") is resolved by
reading the submit's job ids, which are chosen before the transaction first runs: present, it
landed; absent, it did not (a later read resolves a transaction still in flight; see
``Database.transaction``).
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from app.store.arrays import plain
from app.store.queries import COCKROACH, q
from app.store.table import Table


class Durability(Table):
    """The durability statements of one transaction."""

    async def set_critical(self, tenant_id: UUID, critical: bool) -> bool | None:
        """The tenant's new flag; None when there is no such tenant."""
        row = (await self._conn.execute(q("TenantSetCritical"), {"tenant_id": tenant_id, "critical": critical})).first()
        return None if row is None else bool(row.critical)

    async def critical_tenants(self) -> frozenset[UUID]:
        return frozenset(r.tenant_id for r in await self._conn.execute(q("TenantListCritical")))

    async def commit_on_standby(self) -> None:
        """Make this transaction's commit wait until the synchronous standby has applied it.

        PostgreSQL only: CockroachDB replicates every commit to a quorum before it returns."""
        if self._conn.dialect.name == COCKROACH:
            return
        await self._conn.execute(q("TransactionSynchronousCommitRemoteApply"))

    async def existing_jobs(self, job_ids: Iterable[UUID]) -> frozenset[UUID]:
        ids = list(job_ids)
        if not ids:
            return frozenset()
        return frozenset(r.job_id for r in await self._conn.execute(q("JobExistingMany"), {"job_ids": plain(ids)}))
