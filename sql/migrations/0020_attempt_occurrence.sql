-- kairos: no-transaction
-- Kairos schema, version 20: an attempt carries its execution's scheduled_for, the key by which
-- PostgreSQL partitions history (0021, 0022; docs/database-at-scale.md, "Time-partitioned history").
--
-- Expand only: a nullable column (a catalogue change), written from now on by every statement that
-- records an attempt. Rows written before keep NULL; on PostgreSQL they stay in the default
-- partition, where retention takes them in batches as before.
--
-- Attempt rows are written once, when the attempt ends, except the 'running' rows that Kairos opened
-- at lease time before 2026-12; a late result marks an 'expired' or 'cancelled' row 'discarded'.
-- The statements that write those meet such a row through ON CONFLICT (execution_id, attempt,
-- scheduled_for), so these few rows get their scheduled_for here (a NULL never conflicts).
--
-- The unique index is the conflict target of those statements on both databases: on PostgreSQL
-- every unique index of a partitioned table holds the partition key. (execution_id, attempt) stays
-- unique as it was (an execution has one scheduled_for); on CockroachDB this is one more index entry
-- per attempt. Built CONCURRENTLY (a no-op on CockroachDB), outside a transaction: each statement
-- runs alone in autocommit and is idempotent.
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS scheduled_for TIMESTAMPTZ;
UPDATE attempts AS a SET scheduled_for = e.scheduled_for
FROM executions AS e
WHERE a.execution_id = e.execution_id AND a.outcome IN ('running', 'expired', 'cancelled') AND a.scheduled_for IS NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS attempts_occurrence_key ON attempts (execution_id, attempt, scheduled_for);
