-- kairos: no-transaction
-- Kairos schema, version 16: the dashboard's and `kairos status`'s figures read a window of
-- occurrences as a range of one index, however much history the table holds (docs/database-at-scale.md).
--
-- A tenant's settled occurrences (succeeded, dead, cancelled) by scheduled_for: GET /v1/stats/lag,
-- /v1/stats/outcomes and /v1/status read the last minutes as one range per tenant (the operator's
-- view: one range per tenant, reached from tenants). Partial on the settled states, so leases,
-- heartbeats and retries never write into it: each execution adds one entry, when it settles.
-- Live occurrences (ready, leased) come from their own partial indexes; skipped ones have no lag.
--
-- Built without blocking writes: CONCURRENTLY, outside a transaction (the marker on the first line;
-- app/store/migrate.py runs such a file a statement at a time in autocommit, then records it).
-- CockroachDB builds every index online and accepts CONCURRENTLY as a no-op.
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_settled_by_tenant
    ON executions (tenant_id, scheduled_for) WHERE state IN ('succeeded', 'dead', 'cancelled');
