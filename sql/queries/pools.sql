-- name: PoolInsert
-- Create a shared pool; returns nothing when the name is taken.
INSERT INTO pools (name) VALUES (:name)
ON CONFLICT (name) DO NOTHING
RETURNING name, created_at;

-- name: PoolGrantInsert
-- Let a tenant target a shared pool (idempotent).
INSERT INTO pool_grants (pool, tenant_id) VALUES (:pool, :tenant_id)
ON CONFLICT (pool, tenant_id) DO NOTHING;

-- name: PoolList
-- Every shared pool with the names of the tenants granted it.
SELECT p.name, p.created_at,
       coalesce(array_agg(t.name ORDER BY t.name) FILTER (WHERE t.name IS NOT NULL), CAST(ARRAY[] AS TEXT[])) AS tenants
FROM pools AS p
LEFT JOIN pool_grants AS g ON g.pool = p.name
LEFT JOIN tenants AS t ON t.tenant_id = g.tenant_id
GROUP BY p.name, p.created_at
ORDER BY p.name;

-- name: PoolLookupForTenantMany
-- For (tenant, pool name) pairs that name a shared pool: whether the tenant may target it (pairs naming none are absent).
SELECT k.tenant_id, p.name,
       EXISTS (SELECT 1 FROM pool_grants AS g WHERE g.pool = p.name AND g.tenant_id = k.tenant_id) AS granted
FROM unnest(CAST(:tenant_ids AS UUID[]), CAST(:names AS TEXT[])) AS k (tenant_id, name)
JOIN pools AS p ON p.name = k.name;
