-- Kairos schema, version 32: overlap policy buffer_one (Temporal's). An occurrence of a buffer_one job due
-- while its previous execution is unfinished waits on the job row (jobs.buffered_at, its nominal time)
-- instead of becoming an execution; the scheduler starts it once the previous one has settled
-- (DispatchLockBuffered, DispatchStartBuffered). At most one waits: another one due meanwhile is recorded
-- as skipped (overlap). The ready queue and the lease never see it.
--
-- Online (docs/database-at-scale.md): the column is a catalogue change; the concurrency CHECK is widened
-- as version 7 widened its own (the inline constraint's name differs between PostgreSQL and CockroachDB:
-- both dropped IF EXISTS), the new one added NOT VALID (a catalogue change). It runs in the ledger's
-- transaction, so processes migrating at once run it once; version 36 validates it, in autocommit, under
-- a lock that does not block writes.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS buffered_at TIMESTAMPTZ;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_check;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS check_concurrency;
ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_v32
    CHECK (concurrency IN ('allow', 'forbid', 'replace', 'buffer_one')) NOT VALID;
