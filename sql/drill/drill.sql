-- name: DrillShardsLive
-- The local drills: live shard leases per owner and the owner's region, on the database clock.
SELECT owner, region, count(*) AS shards
FROM shard_leases
WHERE owner IS NOT NULL AND lease_until > now()
GROUP BY owner, region
ORDER BY owner;

-- name: DrillJobsPresent
-- The local drills: which of a tenant's acknowledged job ids the database holds (after a failover).
SELECT job_id FROM jobs
WHERE tenant_id = :tenant_id AND job_id = ANY(CAST(:job_ids AS UUID[]));

-- name: DrillAttemptOutcomes
-- The local drills: a tenant's ended attempts per worker and outcome (expired leases, discarded late results).
SELECT worker_id, outcome, count(*) AS attempts
FROM attempts
WHERE tenant_id = :tenant_id
GROUP BY worker_id, outcome
ORDER BY worker_id, outcome;

-- name: DrillExecutionsLeasedBy
-- The local drills: the executions one worker holds leased right now (the work a stalled worker strands).
SELECT execution_id, job_id, scheduled_for, attempt FROM executions
WHERE tenant_id = :tenant_id AND state = 'leased' AND lease_owner = :worker_id;

-- name: DrillDueOf
-- The local drills: which of these jobs still have an occurrence waiting in due_index (not dispatched).
SELECT job_id, next_run_at FROM due_index WHERE job_id = ANY(CAST(:job_ids AS UUID[]));

-- name: DrillExecutionsOf
-- The local drills: the executions of these jobs and their states (dispatched, whether or not run).
SELECT job_id, scheduled_for, state FROM executions WHERE job_id = ANY(CAST(:job_ids AS UUID[]));
