-- name: DueIndexInsert
-- Materialise a job's next occurrence (the write path; one row per job).
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
VALUES (:shard_id, :due_minute, :next_run_at, :job_id, :tenant_id, :nominal_at);

-- name: DueIndexDeleteForJob
-- Remove a job's pending occurrence (pause, cancel).
DELETE FROM due_index WHERE job_id = :job_id
RETURNING shard_id, next_run_at;

-- name: DueIndexLoadShards
-- Due rows of some shards up to :until (current and next minute, plus any overdue backlog), earliest first, with tenant quotas; keyset-paged after (:after_run_at, :after_job_id).
SELECT d.shard_id, d.due_minute, d.next_run_at, d.job_id, d.tenant_id, d.nominal_at,
       t.weight, t.max_dispatch_per_s
FROM due_index AS d
JOIN tenants AS t ON t.tenant_id = d.tenant_id
WHERE d.shard_id = ANY(CAST(:shard_ids AS INT[]))
  AND d.due_minute <= date_trunc('minute', CAST(:until AS TIMESTAMPTZ))
  AND d.next_run_at <= CAST(:until AS TIMESTAMPTZ)
  AND (CAST(:after_run_at AS TIMESTAMPTZ) IS NULL
       OR (d.next_run_at, d.job_id) > (CAST(:after_run_at AS TIMESTAMPTZ), CAST(:after_job_id AS UUID)))
ORDER BY d.next_run_at, d.job_id
LIMIT :limit;

-- name: DueIndexLoadShardsLatest
-- The latest due rows of some shards up to :until, newest first, with tenant quotas: finds rows submitted for "in a second" even while a herd's older rows still wait in due_index.
SELECT d.shard_id, d.due_minute, d.next_run_at, d.job_id, d.tenant_id, d.nominal_at,
       t.weight, t.max_dispatch_per_s
FROM due_index AS d
JOIN tenants AS t ON t.tenant_id = d.tenant_id
WHERE d.shard_id = ANY(CAST(:shard_ids AS INT[]))
  AND d.due_minute <= date_trunc('minute', CAST(:until AS TIMESTAMPTZ))
  AND d.next_run_at <= CAST(:until AS TIMESTAMPTZ)
ORDER BY d.next_run_at DESC, d.job_id DESC
LIMIT :limit;
