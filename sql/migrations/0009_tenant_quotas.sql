-- Kairos schema, version 9: submit quotas per tenant (docs/quotas.md).
-- max_active_jobs: jobs in state active or paused a tenant may hold; max_submit_per_s: submits per
-- second each API process admits for the tenant (a token bucket). NULL: no limit (the default).
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_active_jobs INT;
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_submit_per_s INT;
ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_max_active_jobs_v9;
ALTER TABLE tenants ADD CONSTRAINT tenants_max_active_jobs_v9 CHECK (max_active_jobs IS NULL OR max_active_jobs > 0);
ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_max_submit_per_s_v9;
ALTER TABLE tenants ADD CONSTRAINT tenants_max_submit_per_s_v9 CHECK (max_submit_per_s IS NULL OR max_submit_per_s > 0);

-- The active-jobs check: a tenant's live jobs counted by an index-only scan that stops at the quota
-- (TenantLiveJobCountMany). Partial, so completed and cancelled jobs, the bulk of a long-lived
-- tenant's rows, are not in it.
CREATE INDEX IF NOT EXISTS jobs_tenant_live ON jobs (tenant_id) WHERE state IN ('active', 'paused');
