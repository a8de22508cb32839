-- name: DueIndexInsert
-- Materialise a job's next occurrence (the write path; one row per job).
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
VALUES (:shard_id, :due_minute, :next_run_at, :job_id, :tenant_id, :nominal_at);

-- name: DueIndexDeleteForJob
-- Remove a job's pending occurrence (pause, cancel).
DELETE FROM due_index WHERE job_id = :job_id
RETURNING shard_id, next_run_at;
