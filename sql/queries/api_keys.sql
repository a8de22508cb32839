-- name: ApiKeyInsert
-- Store the hash of a new key (tenant key: pool NULL; shared-pool worker key: tenant_id NULL).
INSERT INTO api_keys (key_hash, tenant_id, pool, label)
VALUES (:key_hash, :tenant_id, :pool, :label);

-- name: ApiKeyResolve
-- The tenant or shared pool an unrevoked key hash belongs to.
SELECT k.tenant_id, k.pool, t.name AS tenant_name
FROM api_keys AS k
LEFT JOIN tenants AS t ON t.tenant_id = k.tenant_id
WHERE k.key_hash = :key_hash AND k.revoked_at IS NULL;

-- name: ApiKeyRevokeForTenant
-- Revoke every live key of a tenant except the one just issued (rotation).
UPDATE api_keys SET revoked_at = now()
WHERE tenant_id = :tenant_id AND revoked_at IS NULL AND key_hash <> :keep_hash
RETURNING key_hash;
