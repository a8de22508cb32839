-- Kairos schema, version 30: how a job ends (docs/states.md, "Lifecycle options").
-- pause_on_failure: a dead-lettered scheduled occurrence pauses the job; paused_reason says why (NULL for
-- a pause through the API). max_runs: the schedule completes after this many occurrences it started;
-- run_count counts them while max_runs is set. delete_after_s: a completed or cancelled job, once its
-- last execution finished this long ago, goes to the archive with its history (docs/retention.md).
-- executions.paused_job marks the dead letter that paused its job, so the job's history says so after a
-- resume too (NULL: it paused nothing; nullable without a default, so adding it rewrites no row).
-- Named CHECKs, dropped IF EXISTS first, as in version 7.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS pause_on_failure BOOL NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS paused_reason TEXT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS max_runs INT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS run_count INT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS delete_after_s INT;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS paused_job BOOL;

ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_max_runs_v30;
ALTER TABLE jobs ADD CONSTRAINT jobs_max_runs_v30 CHECK (max_runs IS NULL OR max_runs >= 1);
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_delete_after_v30;
ALTER TABLE jobs ADD CONSTRAINT jobs_delete_after_v30 CHECK (delete_after_s IS NULL OR delete_after_s >= 0);
