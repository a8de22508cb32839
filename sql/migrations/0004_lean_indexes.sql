-- Kairos schema, version 4: fewer indexes on the hot tables.
-- Every lease and completion changes an execution's state, so PostgreSQL writes a new entry into
-- each of its non-partial indexes per update. The job history is served by UNIQUE (job_id,
-- scheduled_for) read backwards (scheduled_for is unique within a job), and an execution's attempts
-- by the attempts primary key: the two indexes below only cost writes.
DROP INDEX IF EXISTS executions_job_history;
DROP INDEX IF EXISTS attempts_tenant;
