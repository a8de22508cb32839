-- name: SchedulerMemberHeartbeat
-- Announce (or keep alive) a scheduler process of :region until now + :ttl_ms; live members split the shards.
INSERT INTO scheduler_members (owner, lease_until, region, started_at)
VALUES (:owner, coalesce(CAST(:now AS TIMESTAMPTZ), now()) + CAST(:ttl_ms AS INT8) * INTERVAL '1 millisecond',
        :region, coalesce(CAST(:now AS TIMESTAMPTZ), now()))
ON CONFLICT (owner) DO UPDATE
SET lease_until = excluded.lease_until,
    region = excluded.region,
    -- started_at: live without a break since; a member back from an expiry starts over
    started_at = CASE WHEN scheduler_members.lease_until <= excluded.started_at THEN excluded.started_at
                      ELSE scheduler_members.started_at END;

-- name: SchedulerMemberListLive
-- Every live scheduler process (owner order decides who takes the remainder shards), its region and
-- since when it has been a member, with the database clock they were read at.
SELECT owner, region, started_at, coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS as_of
FROM scheduler_members
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
-- Take up to :limit shards whose lease ended :grace_ms ago or more (at once when its last owner was in a
-- region other than :primary_region: a fellow standby's; released shards ended at their release; never-owned
-- ones only with :never_owned); every takeover bumps revision (the dispatch fence).
UPDATE shard_leases
SET owner = :owner,
    lease_until = coalesce(CAST(:now AS TIMESTAMPTZ), now()) + CAST(:ttl_ms AS INT8) * INTERVAL '1 millisecond',
    revision = revision + 1,
    region = :region
WHERE shard_id IN (
        SELECT shard_id FROM shard_leases
        WHERE (lease_until IS NULL AND CAST(:never_owned AS BOOL))
           OR lease_until <= coalesce(CAST(:now AS TIMESTAMPTZ), now())
                             - CASE WHEN region <> CAST(:primary_region AS TEXT) THEN 0
                                    ELSE CAST(:grace_ms AS INT8) END * INTERVAL '1 millisecond'
        -- each process walks the shards in its own order, so concurrent acquirers rarely collide
        ORDER BY (shard_id * 167 + CAST(:salt AS INT)) % 256
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
  -- a live owner keeps its shard, and a standby waits out the grace (the same test as above)
  AND ((lease_until IS NULL AND CAST(:never_owned AS BOOL))
       OR lease_until <= coalesce(CAST(:now AS TIMESTAMPTZ), now())
                         - CASE WHEN region <> CAST(:primary_region AS TEXT) THEN 0
                                ELSE CAST(:grace_ms AS INT8) END * INTERVAL '1 millisecond')
RETURNING shard_id, revision;

-- name: ShardLeaseRelease
-- Hand back some of this owner's shards (rebalancing, shutdown, fail-back); the next owner bumps revision.
-- lease_until keeps the release time (a standby region waits its grace from then), region the last owner's.
UPDATE shard_leases SET owner = NULL, lease_until = coalesce(CAST(:now AS TIMESTAMPTZ), now())
WHERE owner = :owner AND shard_id = ANY(CAST(:shard_ids AS INT[]))  -- only shards still ours
RETURNING shard_id;

-- name: ShardLeaseList
-- Every shard with its owner, the owner's region, expiry and revision (status, drills, tests).
SELECT shard_id, owner, region, lease_until, revision FROM shard_leases ORDER BY shard_id;
