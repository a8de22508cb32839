-- Kairos schema, version 11: tenants' HTTP signing secrets are sealed at rest and rotatable.
-- tenants.signing_secret now holds `fernet:<token>`: a Fernet token, under KAIROS_SECRET_KEY (or
-- KAIROS_HOME/secret.key with the embedded database), of the current secret and, during a
-- rotation's overlap window, the previous one with the end of that window (app/store/sealing.py).
--
-- SQL cannot encrypt with a key it does not have, so this migration only adds what rotation needs;
-- rows from before stay readable as plaintext and are sealed in code: each executor seals every
-- remaining plaintext row when it starts (Tenants.seal_plaintext_signing_secrets), and
-- `kairos db reseal-secrets` does it on demand. Nothing writes plaintext any more.
--
-- signing_secret_rotated_at: the last `kairos tenants rotate-secret` (NULL: never), so an operator
-- can find secrets due for rotation with one query.
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS signing_secret_rotated_at TIMESTAMPTZ;
COMMENT ON COLUMN tenants.signing_secret IS
    'fernet:<token> of the signing secrets (app/store/sealing.py); plaintext only in rows from before migration 0011 until an executor seals them';
