-- Scheduler tier, version 2: membership rows so live schedulers can split the 256 shards evenly.
-- Each scheduler process heartbeats its row (lease_until on the database clock); the live rows,
-- sorted by owner, decide every process's fair share. Rows of dead processes expire and are
-- swept by the survivors. Runs unchanged on PostgreSQL >= 15 and CockroachDB >= 24.1.

CREATE TABLE IF NOT EXISTS scheduler_members (
    owner       TEXT        PRIMARY KEY,
    lease_until TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The leaser's "which shards do I hold" scan (256 rows, but it runs every second on every process).
CREATE INDEX IF NOT EXISTS shard_leases_owner ON shard_leases (owner);
