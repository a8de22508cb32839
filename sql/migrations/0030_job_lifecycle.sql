-- Kairos schema, version 30: how a job ends (docs/states.md, "Lifecycle options").
-- pause_on_failure: a dead-lettered scheduled occurrence pauses the job; paused_reason says why (NULL for
-- a pause through the API). max_runs: the schedule completes after this many occurrences it started;
-- run_count counts them while max_runs is set. delete_after_s: a completed or cancelled job, once its
-- last execution finished this long ago, goes to the archive with its history (docs/retention.md).
-- pause_execution_id: the dead letter that last paused the job (kept after a resume, so the job's history
-- keeps saying which one did; on the job, not on executions, whose ALTER would lock the hottest table).
--
-- Catalogue changes only (docs/database-at-scale.md, "Migrations run while Kairos runs"): each column is
-- nullable or has a constant default, so no row is rewritten. The bounds of max_runs (>= 1) and
-- delete_after_s (>= 0) are the API's (app/api/wire.py) and carry no CHECK: one added to jobs would read
-- the whole table under a lock that blocks writes.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS pause_on_failure BOOL NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS paused_reason TEXT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS max_runs INT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS run_count INT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS delete_after_s INT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS pause_execution_id UUID;
