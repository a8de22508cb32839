-- Kairos schema, version 15: attempts.sent_at, when an HTTP delivery's request left the executor.
-- A webhook starts when its request is sent, not when the executor leases it (a leased delivery may wait
-- for a slot of its origin): start lag, firstStartedAt and startLagMs read coalesce(sent_at, leased_at).
-- NULL for worker-pool attempts, whose lease is their start. A nullable column with no default: no table
-- rewrite, no lock held beyond the catalogue change, on PostgreSQL >= 15 and CockroachDB >= 24.1.
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS sent_at TIMESTAMPTZ;
