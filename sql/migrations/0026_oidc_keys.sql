-- Kairos schema, version 26: the keys that sign HTTP targets' identity tokens (app/store/oidc_keys.py).
--
-- One row per key. The private key is sealed like the tenants' signing secrets (`fernet:<token>` under
-- KAIROS_SECRET_KEY, app/store/sealing.py); the public half is kept as a JWK for /.well-known/jwks.json.
-- A key signs from signs_from until a newer key's signs_from; it is published from its creation (ahead of
-- signing, so verifiers have it before the first token) until retire_at (NULL: the newest key, no end).
-- slot = 'newest' marks the newest key; the UNIQUE constraint keeps it to one row however many processes
-- make the first key at once (NULLs never conflict).
CREATE TABLE IF NOT EXISTS oidc_keys (
    key_id      TEXT PRIMARY KEY,
    algorithm   TEXT NOT NULL,
    public_jwk  JSONB NOT NULL,
    private_key TEXT NOT NULL,
    slot        TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    signs_from  TIMESTAMPTZ NOT NULL,
    retire_at   TIMESTAMPTZ,
    CONSTRAINT oidc_keys_slot_unique UNIQUE (slot),
    CONSTRAINT oidc_keys_algorithm_v26 CHECK (algorithm IN ('ES256', 'RS256')),
    CONSTRAINT oidc_keys_slot_v26 CHECK (slot IS NULL OR slot = 'newest'),
    CONSTRAINT oidc_keys_newest_not_retired_v26 CHECK (slot IS NULL OR retire_at IS NULL)
);
