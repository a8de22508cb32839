-- kairos: no-transaction
-- Kairos schema, version 33: the jobs with a buffer_one occurrence waiting (jobs.buffered_at, version 32),
-- which DispatchLockBuffered reads every second: partial, so it holds only those (nearly always none)
-- and no other write to jobs touches it. Built without blocking writes (see version 16).
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_buffered ON jobs (buffered_at) WHERE buffered_at IS NOT NULL;
