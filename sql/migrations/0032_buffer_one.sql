-- Kairos schema, version 32: overlap policy buffer_one (Temporal's). An occurrence of a buffer_one job due
-- while its previous execution is unfinished waits on the job row (jobs.buffered_at, its nominal time)
-- instead of becoming an execution; the scheduler starts it once the previous one has settled
-- (DispatchLockBuffered, DispatchStartBuffered). At most one waits: another one due meanwhile is recorded as skipped (overlap).
-- The ready queue and the lease never see it.
--
-- The concurrency CHECK is widened as version 7 widened its own (names differ between PostgreSQL and
-- CockroachDB: both dropped IF EXISTS, the new one named).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS buffered_at TIMESTAMPTZ;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_check;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS check_concurrency;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_v32;
ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_v32
    CHECK (concurrency IN ('allow', 'forbid', 'replace', 'buffer_one'));
