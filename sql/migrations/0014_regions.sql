-- Kairos schema, version 14: regions for active-passive schedulers (docs/regions.md).
-- scheduler_members.region: the region each live scheduler announces (KAIROS_REGION), so every
-- process can tell the primary region's members from the standby's. shard_leases.region: the
-- region of the shard's current (once released, its last) owner: a standby takes a shard a fellow
-- standby held without waiting out the takeover grace; status pages and the drills read it.
-- NULL in both: no region configured (a single-region installation). Runs unchanged on
-- PostgreSQL >= 15 and CockroachDB >= 24.1.
ALTER TABLE scheduler_members ADD COLUMN IF NOT EXISTS region TEXT;
ALTER TABLE shard_leases ADD COLUMN IF NOT EXISTS region TEXT;
