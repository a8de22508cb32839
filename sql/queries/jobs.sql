-- name: JobGet
-- One job of a tenant (another tenant's id finds nothing, like an unknown one), with its newest finished execution and whether one is still to run.
SELECT j.*, fin.state AS last_outcome, fin.finished_at AS last_finished_at,
       (open.execution_id IS NOT NULL) AS has_open
FROM jobs AS j
LEFT JOIN LATERAL (
    SELECT e.state, e.finished_at FROM executions AS e
    WHERE e.job_id = j.job_id AND e.state NOT IN ('ready', 'leased')
    ORDER BY e.scheduled_for DESC LIMIT 1
) AS fin ON true
LEFT JOIN LATERAL (
    SELECT e.execution_id FROM executions AS e
    WHERE e.job_id = j.job_id AND e.state IN ('ready', 'leased') LIMIT 1
) AS open ON true
WHERE j.tenant_id = :tenant_id AND j.job_id = :job_id;

-- name: JobGetForUpdate
-- One job of a tenant, locked for a state change.
SELECT * FROM jobs WHERE tenant_id = :tenant_id AND job_id = :job_id FOR UPDATE;

-- name: JobList
-- A page of a tenant's jobs, newest first, filtered by reported state (app.domain.states.reported_job_state), exact name, name prefix, labels (all given pairs) and label selectors (a JSON array of {k, op: in|notin|exists|absent, vs}, all met); keyset cursor. Without a state filter the page is cut before the executions are looked at, so a generic plan walks jobs_tenant_created for one page, however many jobs the tenant holds.
SELECT * FROM (
    SELECT j.*, fin.state AS last_outcome, fin.finished_at AS last_finished_at,
           (open.execution_id IS NOT NULL) AS has_open,
           CASE WHEN j.state = 'completed' AND open.execution_id IS NOT NULL THEN 'active'
                WHEN j.state = 'completed' AND fin.state = 'dead' THEN 'failed'
                ELSE j.state END AS reported_state
    FROM (
        SELECT * FROM jobs AS j
        -- The keyset bound is a plain row comparison (no cursor: past every row), an index condition of
        -- jobs_tenant_created, so the 100th page starts where the 99th ended. The optional filters are
        -- written as CASE: a generic plan estimates each at one half, where `x IS NULL OR ...` is
        -- estimated at a fraction of a percent and the plan sorts every job of the tenant instead.
        WHERE j.tenant_id = :tenant_id
          AND (j.created_at, j.job_id) < (coalesce(CAST(:after_created AS TIMESTAMPTZ),
                                                   CAST('9999-12-31T00:00:00Z' AS TIMESTAMPTZ)),
                                          coalesce(CAST(:after_id AS UUID),
                                                   CAST('ffffffff-ffff-ffff-ffff-ffffffffffff' AS UUID)))
          AND CASE WHEN CAST(:name AS TEXT) IS NULL THEN true ELSE j.name = CAST(:name AS TEXT) END
          AND CASE WHEN CAST(:name_prefix AS TEXT) IS NULL THEN true
                   ELSE substr(j.name, 1, length(CAST(:name_prefix AS TEXT))) = CAST(:name_prefix AS TEXT) END
          AND CASE WHEN CAST(:labels AS JSONB) IS NULL THEN true ELSE j.labels @> CAST(:labels AS JSONB) END
          AND CASE WHEN CAST(:selectors AS JSONB) IS NULL THEN true ELSE NOT EXISTS (
              SELECT 1 FROM jsonb_array_elements(CAST(:selectors AS JSONB)) AS s (sel)
              WHERE NOT CASE s.sel ->> 'op'
                  WHEN 'exists' THEN j.labels -> (s.sel ->> 'k') IS NOT NULL
                  WHEN 'absent' THEN j.labels -> (s.sel ->> 'k') IS NULL
                  WHEN 'in' THEN coalesce(j.labels ->> (s.sel ->> 'k') IN (
                      SELECT jsonb_array_elements_text(s.sel -> 'vs')), false)
                  -- notin: a job without the key matches too (Kubernetes' != and notin)
                  ELSE coalesce(j.labels ->> (s.sel ->> 'k') NOT IN (
                      SELECT jsonb_array_elements_text(s.sel -> 'vs')), true)
              END) END
        ORDER BY j.created_at DESC, j.job_id DESC
        -- :limit, or no cut when the reported state is filtered on (known only after the lookups below)
        LIMIT :scan_limit
    ) AS j
    LEFT JOIN LATERAL (
        SELECT e.state, e.finished_at FROM executions AS e
        WHERE e.job_id = j.job_id AND e.state NOT IN ('ready', 'leased')
        ORDER BY e.scheduled_for DESC LIMIT 1
    ) AS fin ON true
    LEFT JOIN LATERAL (
        SELECT e.execution_id FROM executions AS e
        WHERE e.job_id = j.job_id AND e.state IN ('ready', 'leased') LIMIT 1
    ) AS open ON true
) AS listed
WHERE CAST(:state AS TEXT) IS NULL OR reported_state = CAST(:state AS TEXT)
ORDER BY created_at DESC, job_id DESC
LIMIT :limit;

-- name: JobSetState
-- Move a job between states at the tenant's request (dropping a waiting buffer_one occurrence), guarded on its current state, version and updated_at (a lost race, a dispatch included, changes nothing).
UPDATE jobs SET
    state = :to_state,
    paused_at = CASE WHEN CAST(:to_state AS TEXT) = 'paused' THEN now() ELSE NULL END,
    paused_reason = NULL,  -- the tenant's own pause gives no reason; a resume clears Kairos's
    next_nominal_at = CAST(:next_nominal_at AS TIMESTAMPTZ),
    next_run_at = CAST(:next_run_at AS TIMESTAMPTZ),
    buffered_at = NULL,  -- a pause, resume or cancel drops a waiting buffer_one occurrence (the caller records it)
    version = version + 1,
    updated_at = now()
WHERE tenant_id = :tenant_id AND job_id = :job_id
  AND state = :from_state AND version = :version  -- a concurrent change wins; this one retries or reports
  AND updated_at = CAST(:updated_at AS TIMESTAMPTZ)  -- a dispatch moves updated_at, not the tenant's version
RETURNING *;

-- name: JobRecordSkippedOccurrences
-- Record occurrences of one job that will not run (misfire on resume, dst_gap before the first) as skipped executions.
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at,
                        finished_at, skip_reason)
SELECT CAST(:job_id AS UUID), CAST(:tenant_id AS UUID), CAST(:queue AS TEXT), s.scheduled_for,
       CAST(:max_attempts AS INT), 'skipped', now(), now(), CAST(:reason AS TEXT)
FROM unnest(CAST(:scheduled_fors AS TIMESTAMPTZ[])) AS s (scheduled_for)
ON CONFLICT (job_id, scheduled_for) DO NOTHING;

-- name: JobInsertMany
-- Store many new jobs and their due_index rows in one statement (the submit path, single or batched); a job whose (tenant, Idempotency-Key) is already taken, earlier or earlier in the same batch, gets no row. A payload kept in the object store comes as NULL with its payload_ref. Answers with the ids it did not insert. Each bind is an array named after its column (app.store.jobs builds them from NewJob's fields).
WITH input AS (
    SELECT *
    FROM unnest(CAST(:job_id AS UUID[]), CAST(:tenant_id AS UUID[]), CAST(:name AS TEXT[]),
                CAST(:target_type AS TEXT[]), CAST(:target_ref AS TEXT[]), CAST(:queue AS TEXT[]),
                CAST(:payload AS TEXT[]), CAST(:schedule_kind AS TEXT[]), CAST(:run_at AS TIMESTAMPTZ[]),
                CAST(:cron AS TEXT[]), CAST(:cron_resolved AS TEXT[]), CAST(:tz AS TEXT[]),
                CAST(:jitter_s AS INT[]), CAST(:dst_gap AS TEXT[]), CAST(:dst_repeat AS TEXT[]),
                CAST(:max_attempts AS INT[]), CAST(:backoff_s AS FLOAT8[]), CAST(:max_backoff_s AS FLOAT8[]),
                CAST(:timeout_s AS INT[]), CAST(:concurrency AS TEXT[]), CAST(:misfire AS TEXT[]),
                CAST(:next_nominal_at AS TIMESTAMPTZ[]), CAST(:next_run_at AS TIMESTAMPTZ[]),
                CAST(:idempotency_key AS TEXT[]), CAST(:request_hash AS TEXT[]),
                CAST(:shard_id AS INT[]), CAST(:due_minute AS TIMESTAMPTZ[]),
                CAST(:start_at AS TIMESTAMPTZ[]), CAST(:end_at AS TIMESTAMPTZ[]), CAST(:every_s AS INT[]),
                CAST(:anchor_at AS TIMESTAMPTZ[]), CAST(:labels AS TEXT[]), CAST(:dry_run AS BOOL[]),
                CAST(:max_retry_duration_s AS FLOAT8[]), CAST(:http_method AS TEXT[]),
                CAST(:http_headers AS TEXT[]), CAST(:traceparent AS TEXT[]), CAST(:payload_ref AS TEXT[]),
                CAST(:http_auth AS TEXT[]), CAST(:pause_on_failure AS BOOL[]), CAST(:max_runs AS INT[]),
                CAST(:delete_after_s AS INT[]))
        AS i (job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at,
              cron, cron_resolved, tz, jitter_s, dst_gap, dst_repeat, max_attempts, backoff_s, max_backoff_s,
              timeout_s, concurrency, misfire, next_nominal_at, next_run_at, idempotency_key, request_hash,
              shard_id, due_minute, start_at, end_at, every_s, anchor_at, labels, dry_run,
              max_retry_duration_s, http_method, http_headers, traceparent, payload_ref, http_auth,
              pause_on_failure, max_runs, delete_after_s)
), inserted AS (
    INSERT INTO jobs (
        job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at,
        cron, cron_resolved, tz, jitter_s, dst_gap, dst_repeat, max_attempts, backoff_s, max_backoff_s,
        timeout_s, concurrency, misfire, state, next_nominal_at, next_run_at, first_run_at,
        idempotency_key, request_hash, start_at, end_at, every_s, anchor_at, labels, dry_run,
        max_retry_duration_s, http_method, http_headers, traceparent, payload_ref, http_auth,
        pause_on_failure, max_runs, delete_after_s
    )
    SELECT job_id, tenant_id, name, target_type, target_ref, queue, CAST(payload AS JSONB), schedule_kind, run_at,
           cron, cron_resolved, tz, jitter_s, dst_gap, dst_repeat, max_attempts, backoff_s, max_backoff_s,
           timeout_s, concurrency, misfire, 'active', next_nominal_at, next_run_at, next_run_at,
           idempotency_key, request_hash, start_at, end_at, every_s, anchor_at, CAST(labels AS JSONB), dry_run,
           max_retry_duration_s, http_method, CAST(http_headers AS JSONB), traceparent, payload_ref,
           CAST(http_auth AS JSONB), pause_on_failure, max_runs, delete_after_s
    FROM input
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING job_id
), due AS (
    INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
    SELECT i.shard_id, i.due_minute, i.next_run_at, i.job_id, i.tenant_id, i.next_nominal_at
    FROM input AS i JOIN inserted AS n ON n.job_id = i.job_id
    RETURNING job_id
)
SELECT i.job_id FROM input AS i WHERE i.job_id NOT IN (SELECT job_id FROM inserted);

-- name: DueIndexTenantMinuteCountMany
-- How many occurrences each (tenant, minute) pair has due, up to :at_most (the herd warning after a submit):
-- one index probe per shard and pair, stopping at :at_most of the tenant's rows.
SELECT k.tenant_id, k.due_minute,
       (SELECT count(*) FROM (SELECT 1 FROM due_index AS d
                              WHERE d.shard_id = ANY (CAST(:shard_ids AS INT[])) AND d.due_minute = k.due_minute
                                AND d.tenant_id = k.tenant_id
                              LIMIT :at_most) AS found) AS due
FROM unnest(CAST(:tenant_ids AS UUID[]), CAST(:due_minutes AS TIMESTAMPTZ[])) AS k (tenant_id, due_minute);

-- name: JobGetByIdempotencyKeyMany
-- The jobs earlier requests created under these (tenant, Idempotency-Key) pairs, with their fingerprints.
SELECT j.tenant_id, j.idempotency_key, j.job_id, j.request_hash, j.first_run_at
FROM unnest(CAST(:tenant_ids AS UUID[]), CAST(:idempotency_keys AS TEXT[])) AS k (tenant_id, idempotency_key)
JOIN jobs AS j ON j.tenant_id = k.tenant_id AND j.idempotency_key = k.idempotency_key;

-- name: JobUpdate
-- Replace a job's definition (PATCH), guarded on its version and updated_at; the schedule's next occurrence comes with it.
UPDATE jobs SET
    name = :name, target_type = :target_type, target_ref = :target_ref, queue = :queue,
    payload = CAST(:payload AS JSONB), payload_ref = CAST(:payload_ref AS TEXT), schedule_kind = :schedule_kind, run_at = CAST(:run_at AS TIMESTAMPTZ),
    cron = CAST(:cron AS TEXT), cron_resolved = CAST(:cron_resolved AS TEXT), tz = CAST(:tz AS TEXT),
    jitter_s = :jitter_s, dst_gap = :dst_gap, dst_repeat = :dst_repeat, max_attempts = :max_attempts,
    backoff_s = :backoff_s, max_backoff_s = :max_backoff_s, timeout_s = :timeout_s,
    concurrency = :concurrency, misfire = :misfire, start_at = CAST(:start_at AS TIMESTAMPTZ),
    end_at = CAST(:end_at AS TIMESTAMPTZ), every_s = CAST(:every_s AS INT), anchor_at = CAST(:anchor_at AS TIMESTAMPTZ),
    labels = CAST(:labels AS JSONB), dry_run = :dry_run,
    max_retry_duration_s = CAST(:max_retry_duration_s AS FLOAT8), http_method = :http_method,
    http_headers = CAST(:http_headers AS JSONB), http_auth = CAST(:http_auth AS JSONB),
    pause_on_failure = :pause_on_failure, max_runs = CAST(:max_runs AS INT),
    -- the count of a run limit starts when the limit is set, and ends with it
    run_count = CASE WHEN CAST(:max_runs AS INT) IS NULL OR max_runs IS NULL THEN 0 ELSE run_count END,
    delete_after_s = CAST(:delete_after_s AS INT),
    next_nominal_at = CAST(:next_nominal_at AS TIMESTAMPTZ), next_run_at = CAST(:next_run_at AS TIMESTAMPTZ),
    version = version + 1, updated_at = now()
WHERE tenant_id = :tenant_id AND job_id = :job_id AND version = :version
  AND updated_at = CAST(:updated_at AS TIMESTAMPTZ)  -- a dispatch moves updated_at, not the tenant's version
RETURNING *;

-- name: JobPauseOnFailureMany
-- Pause the active pauseOnFailure jobs of these just dead-lettered executions, saying which dead letter paused each; only occurrences the schedule started count (a manual run's or a backfill's dead letter leaves the schedule alone). As the API's pause: the due row goes, and so does an occurrence dispatched ahead that no worker took. The jobs paused, each with the dead letter that paused it.
WITH dead AS (
    SELECT DISTINCT ON (e.job_id) e.job_id, e.execution_id, e.scheduled_for, e.attempt, e.error
    FROM executions AS e
    WHERE e.execution_id = ANY (CAST(:execution_ids AS UUID[]))
      AND e.state = 'dead' AND e.trigger = 'schedule'
    ORDER BY e.job_id, e.scheduled_for
), ahead AS (
    -- withdrawn's rows (its condition), counted per job before the statement changes anything
    SELECT w.job_id, count(*) AS n FROM executions AS w
    WHERE w.job_id IN (SELECT job_id FROM dead)
      AND w.state = 'ready' AND w.attempt = 0 AND w.trigger = 'schedule'
      AND w.ready_at > coalesce(CAST(:now AS TIMESTAMPTZ), now())
    GROUP BY w.job_id
), paused AS (
    UPDATE jobs AS j SET
        state = 'paused', paused_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()), next_run_at = NULL,
        paused_reason = 'pauseOnFailure: execution ' || CAST(d.execution_id AS TEXT) || ' was dead-lettered after '
                        || CAST(d.attempt AS TEXT) || CASE WHEN d.attempt = 1 THEN ' attempt: ' ELSE ' attempts: ' END
                        || coalesce(d.error, 'no error given'),
        -- the occurrences withdrawn below no longer count as started
        run_count = j.run_count - CASE WHEN j.max_runs IS NULL THEN 0 ELSE coalesce(d.withdrawn, 0) END,
        pause_execution_id = d.execution_id,  -- kept after a resume: the history says which dead letter paused it
        updated_at = coalesce(CAST(:now AS TIMESTAMPTZ), now())  -- version is the tenant's and stays
    FROM (SELECT x.job_id, x.execution_id, x.attempt, x.error, a.n AS withdrawn
          FROM dead AS x LEFT JOIN ahead AS a ON a.job_id = x.job_id) AS d
    WHERE j.job_id = d.job_id AND j.pause_on_failure
      AND j.state = 'active'  -- a job paused, completed or cancelled meanwhile keeps its state
    RETURNING j.job_id, d.execution_id
), undue AS (
    DELETE FROM due_index AS x USING paused AS p WHERE x.job_id = p.job_id
    RETURNING x.job_id
), withdrawn AS (
    DELETE FROM executions AS e USING paused AS p
    WHERE e.job_id = p.job_id
      AND e.state = 'ready' AND e.attempt = 0 AND e.trigger = 'schedule'  -- never leased: nothing ran
      AND e.ready_at > coalesce(CAST(:now AS TIMESTAMPTZ), now())
    RETURNING e.job_id
)
SELECT p.job_id, p.execution_id FROM paused AS p;

-- name: JobAddRunsMany
-- Count the occurrences a dispatch started for jobs with a run limit (maxRuns), or take back (negative) those withdrawn before they started: the planner completes a job when its count reaches the limit.
UPDATE jobs AS j SET run_count = j.run_count + a.runs
FROM unnest(CAST(:job_ids AS UUID[]), CAST(:runs AS INT[])) AS a (job_id, runs)
WHERE j.job_id = a.job_id
  AND j.job_id = ANY (CAST(:job_ids AS UUID[]))  -- an index condition: never a scan of jobs
  AND j.max_runs IS NOT NULL
RETURNING j.job_id;
