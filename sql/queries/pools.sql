-- name: PoolLookupForTenant
-- Whether a shared pool of this name exists, and whether the tenant may target it.
SELECT p.name,
       EXISTS (SELECT 1 FROM pool_grants AS g WHERE g.pool = p.name AND g.tenant_id = :tenant_id) AS granted
FROM pools AS p WHERE p.name = :name;
