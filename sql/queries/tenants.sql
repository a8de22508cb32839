-- name: TenantInsert
-- Create a tenant; returns nothing when the name is taken.
INSERT INTO tenants (tenant_id, name, signing_secret)
VALUES (:tenant_id, :name, :signing_secret)
ON CONFLICT (name) DO NOTHING
RETURNING tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at;

-- name: TenantGetByName
-- One tenant by name.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at
FROM tenants WHERE name = :name;

-- name: TenantGetById
-- One tenant by id.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at
FROM tenants WHERE tenant_id = :tenant_id;

-- name: TenantList
-- All tenants, by name.
SELECT tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at
FROM tenants ORDER BY name;

-- name: TenantSetQuota
-- Change a tenant's quotas; NULL keeps the current value.
UPDATE tenants SET
    weight = coalesce(CAST(:weight AS INT), weight),
    max_inflight = coalesce(CAST(:max_inflight AS INT), max_inflight),
    max_dispatch_per_s = coalesce(CAST(:max_dispatch_per_s AS INT), max_dispatch_per_s)
WHERE tenant_id = :tenant_id
RETURNING tenant_id, name, signing_secret, weight, max_inflight, max_dispatch_per_s, created_at;
