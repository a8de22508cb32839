-- name: JobInsert
-- Store a new job; with an Idempotency-Key a replay finds the key taken and gets no row.
INSERT INTO jobs (
    job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at,
    cron, cron_resolved, tz, jitter_s, dst_gap, dst_repeat, max_attempts, backoff_s, max_backoff_s,
    timeout_s, concurrency, misfire, state, next_nominal_at, next_run_at, first_run_at,
    idempotency_key, request_hash
) VALUES (
    :job_id, :tenant_id, :name, :target_type, :target_ref, :queue, CAST(:payload AS JSONB), :schedule_kind,
    :run_at, :cron, :cron_resolved, :tz, :jitter_s, :dst_gap, :dst_repeat, :max_attempts, :backoff_s,
    :max_backoff_s, :timeout_s, :concurrency, :misfire, 'active', :next_nominal_at, :next_run_at,
    :next_run_at, :idempotency_key, :request_hash
)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING job_id;

-- name: JobGetByIdempotencyKey
-- The job an earlier request with this key created, with its fingerprint.
SELECT job_id, request_hash, first_run_at
FROM jobs WHERE tenant_id = :tenant_id AND idempotency_key = :idempotency_key;

-- name: JobGet
-- One job of a tenant (another tenant's id finds nothing, like an unknown one).
SELECT * FROM jobs WHERE tenant_id = :tenant_id AND job_id = :job_id;

-- name: JobGetForUpdate
-- One job of a tenant, locked for a state change.
SELECT * FROM jobs WHERE tenant_id = :tenant_id AND job_id = :job_id FOR UPDATE;

-- name: JobList
-- A page of a tenant's jobs, newest first, optionally filtered by state and exact name; keyset cursor.
SELECT * FROM jobs
WHERE tenant_id = :tenant_id
  AND (CAST(:state AS TEXT) IS NULL OR state = CAST(:state AS TEXT))
  AND (CAST(:name AS TEXT) IS NULL OR name = CAST(:name AS TEXT))
  AND (CAST(:after_created AS TIMESTAMPTZ) IS NULL
       OR (created_at, job_id) < (CAST(:after_created AS TIMESTAMPTZ), CAST(:after_id AS UUID)))
ORDER BY created_at DESC, job_id DESC
LIMIT :limit;

-- name: JobSetState
-- Move a job between states, guarded on its current state and version (a lost race changes nothing).
UPDATE jobs SET
    state = :to_state,
    paused_at = CASE WHEN CAST(:to_state AS TEXT) = 'paused' THEN now() ELSE NULL END,
    next_nominal_at = CAST(:next_nominal_at AS TIMESTAMPTZ),
    next_run_at = CAST(:next_run_at AS TIMESTAMPTZ),
    version = version + 1,
    updated_at = now()
WHERE tenant_id = :tenant_id AND job_id = :job_id
  AND state = :from_state AND version = :version  -- a concurrent change wins; this one retries or reports
RETURNING *;

-- name: JobRecordSkippedOccurrences
-- Record occurrences of one job that will not run (misfire on resume, dst_gap before the first) as skipped executions.
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at,
                        finished_at, skip_reason)
SELECT CAST(:job_id AS UUID), CAST(:tenant_id AS UUID), CAST(:queue AS TEXT), s.scheduled_for,
       CAST(:max_attempts AS INT), 'skipped', now(), now(), CAST(:reason AS TEXT)
FROM unnest(CAST(:scheduled_fors AS TIMESTAMPTZ[])) AS s (scheduled_for)
ON CONFLICT (job_id, scheduled_for) DO NOTHING;
