-- kairos: no-transaction
-- Kairos schema, version 19: the manual-run in-flight check (TenantManualInFlightCount, docs/quotas.md)
-- counts a tenant's unfinished manual and backfill executions in an index-only scan that stops at the
-- quota. Scheduled executions are not in it.
--
-- Built without blocking writes: CONCURRENTLY, outside a transaction (app/store/migrate.py runs such a
-- file a statement at a time in autocommit); CockroachDB builds every index online.
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_manual_live ON executions (tenant_id)
    WHERE trigger IN ('manual', 'backfill') AND state IN ('ready', 'leased');
