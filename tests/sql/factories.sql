-- Statements only tests and benchmarks run (tests/factories.py), kept out of the shipped
-- catalogue. Same format as sql/queries; tests/unit/test_sql_catalogue.py holds them to the same
-- compatibility rules.

-- name: JobInsert
-- Store one job row exactly as given (tests.factories.job); with an Idempotency-Key a replay gets no row.
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

-- name: ExecutionInsertReadyMany
-- Insert ready executions for (job, scheduled_for) pairs in one statement, due at their scheduled time (the scheduler has its own dispatch statement).
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at)
SELECT j.job_id, j.tenant_id, j.queue, s.scheduled_for, j.max_attempts, 'ready', s.scheduled_for
FROM unnest(CAST(:job_ids AS UUID[]), CAST(:scheduled_for AS TIMESTAMPTZ[])) AS s (job_id, scheduled_for)
JOIN jobs AS j ON j.job_id = s.job_id
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING execution_id;

-- name: JobSeedMany
-- Bulk-insert active jobs and their due_index rows in one statement; jobs whose id exists are left alone.
WITH j AS (
    INSERT INTO jobs (job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at,
                      cron, cron_resolved, tz, jitter_s, dst_gap, dst_repeat, max_attempts, backoff_s,
                      max_backoff_s, timeout_s, concurrency, misfire, state, next_nominal_at, next_run_at,
                      first_run_at)
    SELECT s.job_id, s.tenant_id, s.name, 'queue', s.pool, s.queue, CAST('{}' AS JSONB), s.schedule_kind,
           CASE WHEN s.schedule_kind = 'once' THEN s.next_run_at END,
           s.cron, s.cron, s.tz, s.jitter_s, s.dst_gap, s.dst_repeat, 3, 1, 60, 60, s.concurrency, s.misfire,
           'active', s.nominal_at, s.next_run_at, s.next_run_at
    FROM unnest(CAST(:job_ids AS UUID[]), CAST(:tenant_ids AS UUID[]), CAST(:names AS TEXT[]),
                CAST(:pools AS TEXT[]), CAST(:queues AS TEXT[]), CAST(:schedule_kinds AS TEXT[]),
                CAST(:crons AS TEXT[]), CAST(:tzs AS TEXT[]), CAST(:jitter_ss AS INT[]),
                CAST(:dst_gaps AS TEXT[]), CAST(:dst_repeats AS TEXT[]), CAST(:concurrencies AS TEXT[]),
                CAST(:misfires AS TEXT[]), CAST(:nominal_ats AS TIMESTAMPTZ[]),
                CAST(:next_run_ats AS TIMESTAMPTZ[]))
        AS s (job_id, tenant_id, name, pool, queue, schedule_kind, cron, tz, jitter_s, dst_gap, dst_repeat,
              concurrency, misfire, nominal_at, next_run_at)
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id
)
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
SELECT d.shard_id, d.due_minute, d.next_run_at, d.job_id, d.tenant_id, d.nominal_at
FROM unnest(CAST(:shard_ids AS INT[]), CAST(:due_minutes AS TIMESTAMPTZ[]), CAST(:next_run_ats AS TIMESTAMPTZ[]),
            CAST(:job_ids AS UUID[]), CAST(:tenant_ids AS UUID[]), CAST(:nominal_ats AS TIMESTAMPTZ[]))
    AS d (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
JOIN j ON j.job_id = d.job_id;
