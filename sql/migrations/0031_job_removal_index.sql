-- kairos: no-transaction
-- Kairos schema, version 31: the finished jobs that asked to be removed (deleteAfterCompletionSeconds),
-- found by the scheduler's job-remover duty without reading any other job. A partial index: a job that
-- did not ask costs no entry. Built CONCURRENTLY, outside a transaction (jobs holds data; a no-op on
-- CockroachDB, which builds every index online), in a migration of its own after version 30 adds
-- delete_after_s.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_removal ON jobs (updated_at)
    WHERE delete_after_s IS NOT NULL AND state IN ('completed', 'cancelled');
