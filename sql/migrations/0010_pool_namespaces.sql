-- Kairos schema, version 10: shared pools get a namespace of their own (app/domain/queues.py).
-- A queue target's ref is now `NAME` for the tenant's own pool and `shared/NAME` for a shared
-- pool; before, a bare `NAME` meant the shared pool whenever one of that name existed, so creating
-- a shared pool silently took over a tenant's own pool of the same name.
--
-- Existing jobs keep the queue they were routed to (`jobs.queue` and the executions are not
-- touched): a job whose queue is a shared one has its ref spelled `shared/NAME`, so it reads, and
-- updates, as what it is. Nothing else stores a pool ref (api_keys.pool, pools and pool_grants hold
-- the bare pool name). One UPDATE, plain SQL of both PostgreSQL and CockroachDB; it scans jobs
-- once (no index on queue) and is a no-op when run again.
UPDATE jobs SET target_ref = 'shared/' || substr(queue, 8)
WHERE target_type = 'queue' AND left(queue, 7) = 'shared:' AND left(target_ref, 7) <> 'shared/';
