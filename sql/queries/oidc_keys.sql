-- The keys that sign HTTP targets' identity tokens (app/store/oidc_keys.py). Kairos-wide, not a tenant's:
-- one issuer signs every tenant's tokens (the token's sub names the tenant and the job).

-- name: OidcKeyInsertNewest
-- Store a new key as the newest, signing from :signs_from, unless another newest key exists (a concurrent first start or rotation wins; nothing is written); answers the key id when stored.
INSERT INTO oidc_keys (key_id, algorithm, public_jwk, private_key, slot, created_at, signs_from)
SELECT :key_id, :algorithm, CAST(:public_jwk AS JSONB), :private_key, 'newest', c.now,
       coalesce(CAST(:signs_from AS TIMESTAMPTZ), c.now)
FROM (SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now) AS c
ON CONFLICT (slot) DO NOTHING
RETURNING key_id;

-- name: OidcKeyRetireNewest
-- Take the newest key out of its slot: it signs until the next key's signs_from, and stays published until :retire_at.
UPDATE oidc_keys SET slot = NULL, retire_at = CAST(:retire_at AS TIMESTAMPTZ)
WHERE slot = 'newest'  -- only the newest key; retired keys keep their retire_at
RETURNING key_id;

-- name: OidcKeyPublished
-- The keys a verifier may meet at :now, newest first: those not retired (one signing, one waiting to), then retired ones still in their overlap; public halves only.
SELECT key_id, algorithm, public_jwk, created_at, signs_from, retire_at
FROM oidc_keys
WHERE retire_at IS NULL OR retire_at > coalesce(CAST(:now AS TIMESTAMPTZ), now())
ORDER BY signs_from DESC, key_id;

-- name: OidcKeySigning
-- The key that signs at :now (the one with the latest signs_from not after it), with its sealed private half; no row when none does yet.
SELECT key_id, algorithm, public_jwk, private_key, created_at, signs_from, retire_at
FROM oidc_keys
WHERE signs_from <= coalesce(CAST(:now AS TIMESTAMPTZ), now())
ORDER BY signs_from DESC, key_id
LIMIT 1;

-- name: OidcKeyNewest
-- The newest key (it may not sign yet: a rotation publishes it ahead); no row when there is none.
SELECT key_id, algorithm, public_jwk, created_at, signs_from, retire_at
FROM oidc_keys
WHERE slot = 'newest';

-- name: OidcKeyDeleteRetired
-- Forget keys whose overlap ended before :now (no token they signed is still valid); how many.
DELETE FROM oidc_keys
WHERE slot IS NULL AND retire_at <= coalesce(CAST(:now AS TIMESTAMPTZ), now());

-- name: OidcKeySealedList
-- Every key's sealed private half, for re-sealing under a new KAIROS_SECRET_KEY (a handful of rows).
SELECT key_id, private_key FROM oidc_keys ORDER BY key_id;

-- name: OidcKeyReseal
-- Store a key's re-sealed private half if the stored one is still :expected (a concurrent re-seal changes nothing).
UPDATE oidc_keys SET private_key = :sealed
WHERE key_id = :key_id
  AND private_key = :expected  -- changed since it was read: nothing is written
RETURNING key_id;
