-- name: TenantInsert
-- Create a tenant; returns nothing when the name is taken.
INSERT INTO tenants (tenant_id, name, signing_secret)
VALUES (:tenant_id, :name, :signing_secret)
ON CONFLICT (name) DO NOTHING
RETURNING tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s, max_manual_per_s, max_manual_inflight;

-- name: TenantGetByName
-- One tenant by name.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s, max_manual_per_s, max_manual_inflight
FROM tenants WHERE name = :name;

-- name: TenantGetById
-- One tenant by id.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s, max_manual_per_s, max_manual_inflight
FROM tenants WHERE tenant_id = :tenant_id;

-- name: TenantList
-- All tenants, by name.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s, max_manual_per_s, max_manual_inflight
FROM tenants ORDER BY name;

-- name: TenantSetQuota
-- Change a tenant's quotas; NULL keeps the current value (the submit and manual-run quotas: unless their set_ flag is true).
UPDATE tenants SET
    weight = coalesce(CAST(:weight AS INT), weight),
    max_inflight = coalesce(CAST(:max_inflight AS INT), max_inflight),
    max_dispatch_per_s = coalesce(CAST(:max_dispatch_per_s AS INT), max_dispatch_per_s),
    -- The submit quotas may be cleared (NULL: no limit), so each comes with a flag saying "change it".
    max_active_jobs = CASE WHEN CAST(:set_max_active_jobs AS BOOL) THEN CAST(:max_active_jobs AS INT)
                           ELSE max_active_jobs END,
    max_submit_per_s = CASE WHEN CAST(:set_max_submit_per_s AS BOOL) THEN CAST(:max_submit_per_s AS INT)
                            ELSE max_submit_per_s END,
    max_manual_per_s = CASE WHEN CAST(:set_max_manual_per_s AS BOOL) THEN CAST(:max_manual_per_s AS INT)
                            ELSE max_manual_per_s END,
    max_manual_inflight = CASE WHEN CAST(:set_max_manual_inflight AS BOOL) THEN CAST(:max_manual_inflight AS INT)
                               ELSE max_manual_inflight END
WHERE tenant_id = :tenant_id
RETURNING tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at,
       max_active_jobs, max_submit_per_s, max_manual_per_s, max_manual_inflight;

-- name: TenantSubmitQuotaGet
-- A tenant's submit quotas, and the dispatch pace its herd warnings quote (the API caches them a few seconds per process).
SELECT max_active_jobs, max_submit_per_s, max_manual_per_s, max_manual_inflight, max_dispatch_per_s
FROM tenants WHERE tenant_id = :tenant_id;

-- name: TenantActiveJobCount
-- How many active or paused jobs a tenant holds, counted no further than :cap (an index-only scan of jobs_tenant_live that stops at the quota).
SELECT count(*) AS active
FROM (SELECT 1 FROM jobs
      WHERE tenant_id = :tenant_id AND state IN ('active', 'paused')
      LIMIT CAST(:cap AS INT8)) AS live;

-- name: TenantManualInFlightCount
-- How many manual and backfill executions of a tenant are unfinished, counted no further than :cap (an index-only scan of executions_manual_live that stops at the quota).
SELECT count(*) AS inflight
FROM (SELECT 1 FROM executions
      WHERE tenant_id = :tenant_id AND trigger IN ('manual', 'backfill') AND state IN ('ready', 'leased')
      LIMIT CAST(:cap AS INT8)) AS live;

-- name: TenantSigningSecretGet
-- A tenant's stored signing secret (sealed: app/store/sealing.py) and when it was last rotated.
SELECT signing_secret, signing_secret_rotated_at FROM tenants WHERE tenant_id = :tenant_id;

-- name: TenantSigningSecretSet
-- Store a tenant's newly sealed signing secret if the stored one is still :expected (a concurrent rotation or re-seal changes nothing); a rotation also stamps signing_secret_rotated_at.
UPDATE tenants SET
    signing_secret = :sealed,
    signing_secret_rotated_at = CASE WHEN CAST(:rotated AS BOOL) THEN coalesce(CAST(:now AS TIMESTAMPTZ), now())
                                     ELSE signing_secret_rotated_at END
WHERE tenant_id = :tenant_id
  AND signing_secret = :expected  -- changed since it was read: nothing is written
RETURNING signing_secret_rotated_at;

-- name: TenantSigningSecretPlaintextList
-- Up to :limit tenants whose signing secret is still stored in plaintext (rows from before migration 0011), for sealing.
SELECT tenant_id, signing_secret FROM tenants
WHERE left(signing_secret, 7) <> 'fernet:'
ORDER BY tenant_id
LIMIT CAST(:limit AS INT);

-- name: TenantSigningSecretPage
-- Stored signing secrets by tenant_id after :after (keyset; NULL: from the start), :limit at a time, for re-sealing under a new key.
SELECT tenant_id, signing_secret FROM tenants
WHERE CAST(:after AS UUID) IS NULL OR tenant_id > CAST(:after AS UUID)
ORDER BY tenant_id
LIMIT CAST(:limit AS INT);
