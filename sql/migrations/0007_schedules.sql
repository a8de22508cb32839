-- Kairos schema, version 7: schedules people can manage.
-- Bounds (start_at, end_at), interval schedules (every_s, anchored at anchor_at), labels, dry-run
-- jobs, a retry deadline, the HTTP method and static headers; executions say what made them
-- (schedule, manual run, backfill) and a dry run is recorded as skipped with reason 'dry_run'.
--
-- Widening a CHECK: the constraints were declared inline, so their names differ between PostgreSQL
-- (<table>_<column>_check) and CockroachDB (check_<column>); both are dropped IF EXISTS and the new
-- one is named. ALTER TABLE ... DROP CONSTRAINT IF EXISTS and ADD CONSTRAINT ... CHECK run on both
-- (https://www.cockroachlabs.com/docs/stable/alter-table#drop-constraint,
--  https://www.postgresql.org/docs/15/sql-altertable.html).

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS start_at TIMESTAMPTZ;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS end_at TIMESTAMPTZ;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS every_s INT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS anchor_at TIMESTAMPTZ;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS labels JSONB NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS dry_run BOOL NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS max_retry_duration_s FLOAT8;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS http_method TEXT NOT NULL DEFAULT 'POST';
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS http_headers JSONB NOT NULL DEFAULT '{}';

ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_schedule_kind_check;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS check_schedule_kind;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_schedule_kind_v7;
ALTER TABLE jobs ADD CONSTRAINT jobs_schedule_kind_v7 CHECK (schedule_kind IN ('once', 'cron', 'every'));
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_every_v7;
ALTER TABLE jobs ADD CONSTRAINT jobs_every_v7
    CHECK ((schedule_kind = 'every') = (every_s IS NOT NULL AND every_s >= 1 AND anchor_at IS NOT NULL));
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_bounds_v7;
ALTER TABLE jobs ADD CONSTRAINT jobs_bounds_v7 CHECK (start_at IS NULL OR end_at IS NULL OR start_at < end_at);
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_http_method_v7;
ALTER TABLE jobs ADD CONSTRAINT jobs_http_method_v7 CHECK (http_method IN ('POST', 'PUT', 'PATCH', 'GET'));

ALTER TABLE executions ADD COLUMN IF NOT EXISTS trigger TEXT NOT NULL DEFAULT 'schedule';
ALTER TABLE executions DROP CONSTRAINT IF EXISTS executions_trigger_v7;
ALTER TABLE executions ADD CONSTRAINT executions_trigger_v7 CHECK (trigger IN ('schedule', 'manual', 'backfill'));
ALTER TABLE executions DROP CONSTRAINT IF EXISTS executions_skip_reason_check;
ALTER TABLE executions DROP CONSTRAINT IF EXISTS check_skip_reason;
ALTER TABLE executions DROP CONSTRAINT IF EXISTS executions_skip_reason_v7;
ALTER TABLE executions ADD CONSTRAINT executions_skip_reason_v7
    CHECK (skip_reason IN ('overlap', 'misfire', 'dst_gap', 'dry_run', 'paused'));
