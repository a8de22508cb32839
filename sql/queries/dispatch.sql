-- name: DispatchClaimDue
-- Fenced claim of a dispatch batch: delete the batch's due_index rows of shards still held under the presented revision, and return per batch row (by ordinal) whether it was claimed or fenced, with its job's dispatch fields and whether the job has an unfinished execution.
WITH batch AS (
    SELECT * FROM unnest(CAST(:shard_ids AS INT[]), CAST(:revisions AS INT8[]),
                         CAST(:due_minutes AS TIMESTAMPTZ[]), CAST(:next_run_ats AS TIMESTAMPTZ[]),
                         CAST(:job_ids AS UUID[])) WITH ORDINALITY
        AS b (shard_id, revision, due_minute, next_run_at, job_id, ord)
),
claimed AS (
    DELETE FROM due_index AS d
    USING batch AS b, shard_leases AS l
    WHERE d.shard_id = b.shard_id AND d.due_minute = b.due_minute
      AND d.next_run_at = b.next_run_at AND d.job_id = b.job_id
      -- the fence: a shard lost, expired or re-acquired by anyone (even us) since loading claims nothing
      AND l.shard_id = b.shard_id AND l.owner = :owner AND l.revision = b.revision
      AND l.lease_until > coalesce(CAST(:now AS TIMESTAMPTZ), now())
    RETURNING d.next_run_at, d.job_id, d.nominal_at
)
-- The caller knows each row's key, tenant and nominal time already: only the ordinal comes back.
SELECT b.ord,
       (c.job_id IS NOT NULL) AS claimed,
       (l.owner IS NULL OR l.owner <> :owner OR l.revision <> b.revision OR l.lease_until IS NULL
        OR l.lease_until <= coalesce(CAST(:now AS TIMESTAMPTZ), now())) AS fenced,
       j.state AS job_state, j.schedule_kind, j.cron_resolved, j.tz, j.jitter_s, j.dst_gap, j.dst_repeat,
       j.concurrency, j.misfire, j.queue, j.max_attempts,
       (j.concurrency <> 'allow' AND EXISTS (
           SELECT 1 FROM executions AS e
           WHERE e.job_id = c.job_id AND e.state IN ('ready', 'leased') AND e.scheduled_for <> c.nominal_at
       )) AS overlapping,
       j.dry_run, j.end_at, j.every_s, j.traceparent, j.max_runs, j.run_count,
       j.anchor_at,  -- an every job's grid: with tz, its wall-clock time
       j.buffered_at  -- buffer_one: the occurrence already waiting for the previous one to settle
FROM batch AS b
JOIN shard_leases AS l ON l.shard_id = b.shard_id
LEFT JOIN claimed AS c ON c.job_id = b.job_id AND c.next_run_at = b.next_run_at
LEFT JOIN jobs AS j ON j.job_id = c.job_id
ORDER BY b.ord;

-- name: DispatchCancelReplaced
-- Replace overlap: cancel the unfinished executions of these jobs older than the occurrence replacing them, and write the attempts rows of those a worker held, ended 'cancelled'; the worker's next call gets LEASE_LOST.
WITH batch AS (
    SELECT * FROM unnest(CAST(:job_ids AS UUID[]), CAST(:scheduled_fors AS TIMESTAMPTZ[]),
                         CAST(:errors AS TEXT[]))
        AS b (job_id, scheduled_for, error)
), victims AS (
    -- The rows before the update (one snapshot): a leased one's live attempt. Once each, by the
    -- newest occurrence replacing it.
    SELECT DISTINCT ON (e.execution_id)
           e.execution_id, e.attempt, e.tenant_id, e.state, e.lease_owner, e.started_at, e.lease_until, b.error,
           e.scheduled_for
    FROM executions AS e JOIN batch AS b ON e.job_id = b.job_id
    WHERE e.scheduled_for < b.scheduled_for
      AND e.state IN ('ready', 'leased')  -- finished work keeps its outcome
    ORDER BY e.execution_id, b.scheduled_for DESC
), cancelled AS (
    UPDATE executions AS e
    SET state = 'cancelled', lease_owner = NULL, lease_until = NULL,
        finished_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()),
        error = v.error
    FROM victims AS v
    WHERE e.execution_id = v.execution_id
      AND e.state IN ('ready', 'leased')  -- finished work keeps its outcome
      AND e.state = v.state AND e.attempt = v.attempt  -- changed meanwhile: left alone
    RETURNING e.execution_id
)
INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at, outcome, error,
                      scheduled_for)
SELECT v.execution_id, v.attempt, v.tenant_id, v.lease_owner, v.started_at, v.lease_until,
       coalesce(CAST(:now AS TIMESTAMPTZ), now()), 'cancelled', 'replaced', v.scheduled_for
FROM victims AS v
WHERE v.state = 'leased' AND v.execution_id IN (SELECT execution_id FROM cancelled)
ON CONFLICT (execution_id, attempt, scheduled_for) DO UPDATE SET  -- a 'running' row opened at lease time (before 2026-12)
    outcome = 'cancelled', finished_at = excluded.finished_at, error = excluded.error
RETURNING execution_id;

-- name: DispatchRecord
-- The writes of a claimed batch in one statement: insert its executions (ready or skipped; ON CONFLICT (job_id, scheduled_for) DO NOTHING), insert cron jobs' next due_index rows, advance the jobs (updated_at moves, version is the tenant's and stays) and buffer a buffer_one job's occurrence on its row.
WITH ins AS (
    INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at,
                            dispatched_at, finished_at, skip_reason, error, traceparent)
    SELECT e.job_id, e.tenant_id, e.queue, e.scheduled_for, e.max_attempts, e.state, e.ready_at,
           coalesce(CAST(:now AS TIMESTAMPTZ), now()),
           CASE WHEN e.state = 'skipped' THEN coalesce(CAST(:now AS TIMESTAMPTZ), now()) END,
           e.skip_reason, e.note, e.traceparent
    FROM unnest(CAST(:e_job_ids AS UUID[]), CAST(:e_tenant_ids AS UUID[]), CAST(:e_queues AS TEXT[]),
                CAST(:e_scheduled_fors AS TIMESTAMPTZ[]), CAST(:e_max_attempts AS INT[]),
                CAST(:e_states AS TEXT[]), CAST(:e_ready_ats AS TIMESTAMPTZ[]),
                CAST(:e_skip_reasons AS TEXT[]), CAST(:e_notes AS TEXT[]), CAST(:e_traceparents AS TEXT[]))
        AS e (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at, skip_reason, note,
              traceparent)
    ON CONFLICT (job_id, scheduled_for) DO NOTHING  -- an occurrence is dispatched once, however often retried
    RETURNING state
),
nxt AS (
    INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
    SELECT * FROM unnest(CAST(:n_shard_ids AS INT[]), CAST(:n_due_minutes AS TIMESTAMPTZ[]),
                         CAST(:n_next_run_ats AS TIMESTAMPTZ[]), CAST(:n_job_ids AS UUID[]),
                         CAST(:n_tenant_ids AS UUID[]), CAST(:n_nominal_ats AS TIMESTAMPTZ[]))
    ON CONFLICT DO NOTHING  -- one due row per job: a row the API wrote meanwhile (resume) wins
    RETURNING job_id
),
adv AS (
    UPDATE jobs AS j
    SET state = a.state, next_nominal_at = a.next_nominal_at, next_run_at = a.next_run_at,
        -- buffer_one: the occurrence that waits for the previous one to settle (one at most: one waiting keeps its place)
        buffered_at = coalesce(j.buffered_at, a.buffered_at),
        updated_at = coalesce(CAST(:now AS TIMESTAMPTZ), now())
    FROM unnest(CAST(:a_job_ids AS UUID[]), CAST(:a_from_states AS TEXT[]), CAST(:a_states AS TEXT[]),
                CAST(:a_next_nominal_ats AS TIMESTAMPTZ[]), CAST(:a_next_run_ats AS TIMESTAMPTZ[]),
                CAST(:a_buffered_ats AS TIMESTAMPTZ[]))
        AS a (job_id, from_state, state, next_nominal_at, next_run_at, buffered_at)
    WHERE j.job_id = a.job_id
      AND j.job_id = ANY(CAST(:a_job_ids AS UUID[]))  -- an index condition: never a scan of jobs
      AND j.state = a.from_state  -- the state the claim read: a job paused or cancelled meanwhile keeps its own
    RETURNING j.job_id
)
SELECT (SELECT count(*) FROM ins WHERE state = 'ready') AS ready,
       (SELECT count(*) FROM ins WHERE state = 'skipped') AS skipped,
       (SELECT count(*) FROM nxt) AS next_due,
       (SELECT count(*) FROM adv) AS advanced;

-- name: DispatchLockBuffered
-- buffer_one overlap: lock up to :limit jobs with an occurrence waiting (jobs.buffered_at) that is to be settled now, oldest first: a buffer_one job none of whose executions is still ready or leased (the previous one succeeded, was dead-lettered or cancelled), a job paused or cancelled meanwhile (its waiting one is dropped), and a job whose overlap policy an update changed since (the waiting one is decided by the policy it has now). Answers what the BufferStarter decides with and DispatchStartBuffered needs, the job's traceparent included.
SELECT j.job_id, j.tenant_id, j.buffered_at, j.state, j.traceparent, j.concurrency, j.max_runs, j.run_count,
       (j.state = 'active' AND j.concurrency <> 'allow' AND (
           SELECT e.execution_id FROM executions AS e
           WHERE e.job_id = j.job_id AND e.state IN ('ready', 'leased') LIMIT 1) IS NOT NULL) AS in_flight
FROM jobs AS j
WHERE j.buffered_at IS NOT NULL  -- jobs_buffered: nearly always empty
  AND (j.state NOT IN ('active', 'completed') OR j.concurrency <> 'buffer_one'
       -- A probe of each waiting job's own executions (UNIQUE (job_id, scheduled_for)); as NOT EXISTS the
       -- planner made it a hash anti join that read every ready and leased row (10.8 ms against 0.5 for 100
       -- waiting jobs beside 20,000 executions, more with a herd in flight).
       OR (SELECT e.execution_id FROM executions AS e
           WHERE e.job_id = j.job_id AND e.state IN ('ready', 'leased') LIMIT 1) IS NULL)
ORDER BY j.buffered_at
LIMIT CAST(:limit AS INT)
FOR UPDATE OF j SKIP LOCKED;

-- name: DispatchStartBuffered
-- buffer_one overlap: clear the waiting occurrences DispatchLockBuffered locked and settle each: started (an execution ready now, with its trace; it counts toward maxRuns, and completes the job when it reaches the limit or when the schedule has nothing further due), recorded as skipped (:skip_reasons, when a pause or an overlap policy changed to forbid drops it), or only cleared (a cancelled job's). Answers the executions it inserted.
WITH batch AS (
    SELECT * FROM unnest(CAST(:job_ids AS UUID[]), CAST(:buffered_ats AS TIMESTAMPTZ[]), CAST(:starts AS BOOL[]),
                         CAST(:traceparents AS TEXT[]), CAST(:skip_reasons AS TEXT[]), CAST(:notes AS TEXT[]))
        AS b (job_id, buffered_at, start, traceparent, skip_reason, note)
), cleared AS (
    UPDATE jobs AS j
    SET buffered_at = NULL,
        -- maxRuns: a buffered occurrence counts when it starts (Temporal spends a remaining action at the start)
        run_count = CASE WHEN b.start AND j.max_runs IS NOT NULL THEN coalesce(j.run_count, 0) + 1 ELSE j.run_count END,
        state = CASE WHEN b.start AND j.state = 'active'
                          AND (j.next_run_at IS NULL OR coalesce(j.run_count, 0) + 1 >= j.max_runs)
                     THEN 'completed' ELSE j.state END,
        next_run_at = CASE WHEN b.start AND j.state = 'active' AND coalesce(j.run_count, 0) + 1 >= j.max_runs
                           THEN NULL ELSE j.next_run_at END,
        next_nominal_at = CASE WHEN b.start AND j.state = 'active' AND coalesce(j.run_count, 0) + 1 >= j.max_runs
                               THEN NULL ELSE j.next_nominal_at END,
        updated_at = CASE WHEN b.start AND j.state = 'active'
                               AND (j.next_run_at IS NULL OR coalesce(j.run_count, 0) + 1 >= j.max_runs)
                          THEN coalesce(CAST(:now AS TIMESTAMPTZ), now()) ELSE j.updated_at END
    FROM batch AS b
    WHERE j.job_id = b.job_id
      AND j.job_id = ANY (CAST(:job_ids AS UUID[]))  -- an index condition: never a scan of jobs
      AND j.buffered_at = b.buffered_at  -- the one locked: changed meanwhile, it is left for the next round
    RETURNING j.job_id, j.tenant_id, j.queue, j.max_attempts, j.state
), ended AS (
    -- The job the start completed (maxRuns reached) has no next occurrence: its due row goes.
    DELETE FROM due_index AS d
    USING cleared AS c
    WHERE d.job_id = c.job_id AND c.state = 'completed'
    RETURNING d.job_id
)
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at, dispatched_at,
                        finished_at, skip_reason, error, traceparent)
SELECT c.job_id, c.tenant_id, c.queue, b.buffered_at, c.max_attempts,
       CASE WHEN b.start THEN 'ready' ELSE 'skipped' END,
       coalesce(CAST(:now AS TIMESTAMPTZ), now()), coalesce(CAST(:now AS TIMESTAMPTZ), now()),
       CASE WHEN NOT b.start THEN coalesce(CAST(:now AS TIMESTAMPTZ), now()) END,
       CASE WHEN NOT b.start THEN b.skip_reason END,
       CASE WHEN NOT b.start THEN b.note END,
       b.traceparent
FROM cleared AS c JOIN batch AS b ON b.job_id = c.job_id
WHERE b.start OR b.skip_reason IS NOT NULL
ON CONFLICT (job_id, scheduled_for) DO NOTHING  -- an occurrence is dispatched once
RETURNING job_id, scheduled_for, state;
