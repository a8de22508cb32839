-- Kairos schema, version 13: per-tenant durability (docs/durability.md).
-- tenants.critical: the submits of a critical tenant commit with synchronous_commit = remote_apply
-- (PostgreSQL with a synchronous standby: the job is applied on the standby before 201); every other
-- tenant's commit locally. Set with `kairos tenants set-critical NAME on|off`. CockroachDB replicates
-- every commit by consensus, so there the flag changes nothing. Runs unchanged on PostgreSQL >= 15
-- and CockroachDB >= 24.1.
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS critical BOOL NOT NULL DEFAULT false;
