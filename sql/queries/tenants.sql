-- name: TenantInsert
-- Create a tenant; returns nothing when the name is taken.
INSERT INTO tenants (tenant_id, name, signing_secret)
VALUES (:tenant_id, :name, :signing_secret)
ON CONFLICT (name) DO NOTHING
RETURNING tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s;

-- name: TenantGetByName
-- One tenant by name.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s
FROM tenants WHERE name = :name;

-- name: TenantGetById
-- One tenant by id.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s
FROM tenants WHERE tenant_id = :tenant_id;

-- name: TenantList
-- All tenants, by name.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s
FROM tenants ORDER BY name;

-- name: TenantSetQuota
-- Change a tenant's quotas; NULL keeps the current value (the submit quotas: unless their set_ flag is true).
UPDATE tenants SET
    weight = coalesce(CAST(:weight AS INT), weight),
    max_inflight = coalesce(CAST(:max_inflight AS INT), max_inflight),
    max_dispatch_per_s = coalesce(CAST(:max_dispatch_per_s AS INT), max_dispatch_per_s),
    -- The submit quotas may be cleared (NULL: no limit), so each comes with a flag saying "change it".
    max_active_jobs = CASE WHEN CAST(:set_max_active_jobs AS BOOL) THEN CAST(:max_active_jobs AS INT)
                           ELSE max_active_jobs END,
    max_submit_per_s = CASE WHEN CAST(:set_max_submit_per_s AS BOOL) THEN CAST(:max_submit_per_s AS INT)
                            ELSE max_submit_per_s END
WHERE tenant_id = :tenant_id
RETURNING tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s;

-- name: TenantSubmitQuotaGet
-- A tenant's submit quotas (the API caches them a few seconds per process).
SELECT max_active_jobs, max_submit_per_s FROM tenants WHERE tenant_id = :tenant_id;

-- name: TenantActiveJobCount
-- How many active or paused jobs a tenant holds, counted no further than :cap (an index-only scan of jobs_tenant_live that stops at the quota).
SELECT count(*) AS active
FROM (SELECT 1 FROM jobs
      WHERE tenant_id = :tenant_id AND state IN ('active', 'paused')
      LIMIT CAST(:cap AS INT8)) AS live;
