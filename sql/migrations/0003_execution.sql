-- Execution tier: what fair leasing, attempts history and dead-letter replay need.

-- A late result (the attempt had lost its lease) is kept here with outcome 'discarded';
-- a current one is kept here and on the execution.
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS result JSONB;

-- In-flight count per (queue, tenant): fair leasing caps it at tenants.max_inflight.
CREATE INDEX IF NOT EXISTS executions_inflight ON executions (queue, tenant_id) WHERE state = 'leased';

-- History of one execution's attempts.
CREATE INDEX IF NOT EXISTS attempts_tenant ON attempts (tenant_id, execution_id);

-- Bulk dead-letter replay budget: a fixed window per tenant, shared by every API replica.
CREATE TABLE IF NOT EXISTS replay_budgets (
    tenant_id       UUID        PRIMARY KEY REFERENCES tenants (tenant_id),
    window_start    TIMESTAMPTZ NOT NULL,
    used            INT         NOT NULL DEFAULT 0 CHECK (used >= 0)
);
