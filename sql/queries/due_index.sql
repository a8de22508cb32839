-- name: DueIndexInsert
-- Materialise a job's next occurrence (the write path; one row per job).
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
VALUES (:shard_id, :due_minute, :next_run_at, :job_id, :tenant_id, :nominal_at);

-- name: DueIndexDeleteForJob
-- Remove a job's pending occurrence (pause, cancel).
DELETE FROM due_index WHERE job_id = :job_id
RETURNING shard_id, next_run_at;

-- name: DueIndexLoadShards
-- Due rows of some shards up to :until (current and next minute, plus any overdue backlog), earliest first, with tenant quotas: each shard's next :per_shard rows after its own cursor (a range of its primary key, so a page costs what it reads however large the backlog), at most :limit in all.
SELECT d.shard_id, d.due_minute, d.next_run_at, d.job_id, d.tenant_id, d.nominal_at,
       t.weight, t.max_dispatch_per_s
FROM unnest(CAST(:shard_ids AS INT[]), CAST(:after_minutes AS TIMESTAMPTZ[]),
            CAST(:after_run_ats AS TIMESTAMPTZ[]), CAST(:after_job_ids AS UUID[]))
    AS s (shard_id, after_minute, after_run_at, after_job_id)
CROSS JOIN LATERAL (
    SELECT x.shard_id, x.due_minute, x.next_run_at, x.job_id, x.tenant_id, x.nominal_at
    FROM due_index AS x
    WHERE x.shard_id = s.shard_id
      AND (x.due_minute, x.next_run_at, x.job_id) > (s.after_minute, s.after_run_at, s.after_job_id)
      AND x.due_minute <= date_trunc('minute', CAST(:until AS TIMESTAMPTZ))
      AND x.next_run_at <= CAST(:until AS TIMESTAMPTZ)
    ORDER BY x.due_minute, x.next_run_at, x.job_id
    LIMIT :per_shard
) AS d
JOIN tenants AS t ON t.tenant_id = d.tenant_id
ORDER BY d.due_minute, d.next_run_at, d.job_id
LIMIT :limit;

-- name: DueIndexLoadShardsLatest
-- The latest due rows of some shards up to :until, newest first, with tenant quotas: finds rows submitted for "in a second" even while a herd's older rows still wait in due_index. Each shard's latest :per_shard rows (a backward range of its primary key), the latest :limit of those.
SELECT d.shard_id, d.due_minute, d.next_run_at, d.job_id, d.tenant_id, d.nominal_at,
       t.weight, t.max_dispatch_per_s
FROM unnest(CAST(:shard_ids AS INT[])) AS s (shard_id)
CROSS JOIN LATERAL (
    SELECT x.shard_id, x.due_minute, x.next_run_at, x.job_id, x.tenant_id, x.nominal_at
    FROM due_index AS x
    WHERE x.shard_id = s.shard_id
      AND x.due_minute <= date_trunc('minute', CAST(:until AS TIMESTAMPTZ))
      AND x.next_run_at <= CAST(:until AS TIMESTAMPTZ)
    ORDER BY x.due_minute DESC, x.next_run_at DESC, x.job_id DESC
    LIMIT :per_shard
) AS d
JOIN tenants AS t ON t.tenant_id = d.tenant_id
ORDER BY d.next_run_at DESC, d.job_id DESC
LIMIT :limit;
