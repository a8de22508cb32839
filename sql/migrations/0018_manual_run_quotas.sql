-- Kairos schema, version 18: quotas on the executions a tenant makes outside the schedule (:run and :backfill),
-- docs/quotas.md. max_manual_per_s: such executions each API process admits per second for the
-- tenant (a token bucket; a backfill takes one token per occurrence); max_manual_inflight: such
-- executions not yet finished (ready or leased) the tenant may hold. NULL: no limit (the default).
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_manual_per_s INT;
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_manual_inflight INT;
ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_max_manual_per_s_v30;
ALTER TABLE tenants ADD CONSTRAINT tenants_max_manual_per_s_v30 CHECK (max_manual_per_s IS NULL OR max_manual_per_s > 0);
ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_max_manual_inflight_v30;
ALTER TABLE tenants ADD CONSTRAINT tenants_max_manual_inflight_v30 CHECK (max_manual_inflight IS NULL OR max_manual_inflight > 0);

