-- Kairos schema, version 31: the finished jobs that asked to be removed (deleteAfterCompletionSeconds),
-- found by the scheduler's job-remover duty without reading any other job. A partial index: a job that
-- did not ask costs no entry. Its own migration: CockroachDB builds an index on a column added in the
-- same transaction only after that transaction (version 30 adds delete_after_s).
CREATE INDEX IF NOT EXISTS jobs_removal ON jobs (updated_at)
    WHERE delete_after_s IS NOT NULL AND state IN ('completed', 'cancelled');
