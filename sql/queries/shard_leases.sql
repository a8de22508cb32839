-- name: SchedulerMemberHeartbeat
-- Announce (or keep alive) a scheduler process until now + :ttl_ms; live members split the shards.
INSERT INTO scheduler_members (owner, lease_until)
VALUES (:owner, coalesce(CAST(:now AS TIMESTAMPTZ), now()) + CAST(:ttl_ms AS INT8) * INTERVAL '1 millisecond')
ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until;

-- name: SchedulerMemberListLive
-- Owners of every live scheduler process, in the order that decides who takes the remainder shards.
SELECT owner FROM scheduler_members
WHERE lease_until > coalesce(CAST(:now AS TIMESTAMPTZ), now())
ORDER BY owner;

-- name: SchedulerMemberLeave
-- Graceful shutdown: stop counting this process in the fair share at once.
DELETE FROM scheduler_members WHERE owner = :owner;

-- name: SchedulerMemberSweep
-- Forget processes whose membership expired long ago (crashed schedulers).
DELETE FROM scheduler_members
WHERE lease_until < coalesce(CAST(:now AS TIMESTAMPTZ), now()) - CAST(:grace_ms AS INT8) * INTERVAL '1 millisecond';

-- name: ShardLeaseRenew
-- Extend every unexpired lease this owner holds; an expired one is lost and must be re-acquired.
UPDATE shard_leases
SET lease_until = coalesce(CAST(:now AS TIMESTAMPTZ), now()) + CAST(:ttl_ms AS INT8) * INTERVAL '1 millisecond'
WHERE owner = :owner
  AND lease_until > coalesce(CAST(:now AS TIMESTAMPTZ), now())  -- an expired lease may already be someone else's
RETURNING shard_id, revision;

-- name: ShardLeaseAcquire
-- Take up to :limit unowned or expired shards; every takeover bumps revision (the dispatch fence).
UPDATE shard_leases
SET owner = :owner,
    lease_until = coalesce(CAST(:now AS TIMESTAMPTZ), now()) + CAST(:ttl_ms AS INT8) * INTERVAL '1 millisecond',
    revision = revision + 1
WHERE shard_id IN (
        SELECT shard_id FROM shard_leases
        WHERE owner IS NULL OR lease_until IS NULL
           OR lease_until <= coalesce(CAST(:now AS TIMESTAMPTZ), now())
        -- each process walks the shards in its own order, so concurrent acquirers rarely collide
        ORDER BY (shard_id * 167 + CAST(:salt AS INT)) % 256
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
  AND (owner IS NULL OR lease_until IS NULL
       OR lease_until <= coalesce(CAST(:now AS TIMESTAMPTZ), now()))  -- a live owner keeps its shard
RETURNING shard_id, revision;

-- name: ShardLeaseRelease
-- Hand back some of this owner's shards (rebalancing, shutdown); the next owner bumps revision.
UPDATE shard_leases SET owner = NULL, lease_until = NULL
WHERE owner = :owner AND shard_id = ANY(CAST(:shard_ids AS INT[]))  -- only shards still ours
RETURNING shard_id;

-- name: ShardLeaseList
-- Every shard with its owner, expiry and revision (status, tests).
SELECT shard_id, owner, lease_until, revision FROM shard_leases ORDER BY shard_id;
