-- name: SchemaMigrationsCreate
-- Create the table that records applied migrations (idempotent).
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     TEXT        PRIMARY KEY,
    checksum    TEXT        NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: SchemaMigrationClaim
-- Record a migration as applied; returns nothing when another process already applied it.
INSERT INTO schema_migrations (version, checksum)
VALUES (:version, :checksum)
ON CONFLICT (version) DO NOTHING
RETURNING version;

-- name: SchemaMigrationsList
-- Applied migrations and their checksums.
SELECT version, checksum FROM schema_migrations ORDER BY version;
