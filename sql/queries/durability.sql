-- Per-tenant durability and ambiguous commits (app/store/durability.py, docs/durability.md).

-- name: TenantSetCritical
-- Mark a tenant critical (its submits commit synchronously to the standby) or not; its new flag.
UPDATE tenants SET critical = :critical WHERE tenant_id = :tenant_id
RETURNING critical;

-- name: TenantListCritical
-- The ids of every critical tenant (few; each API process keeps them for a couple of seconds).
SELECT tenant_id FROM tenants WHERE critical;

-- name: TransactionSynchronousCommitRemoteApply
-- PostgreSQL: this transaction's COMMIT returns only once a synchronous standby has applied it (no-op without one configured).
SET LOCAL synchronous_commit = remote_apply;

-- name: JobExistingMany
-- Which of these job ids are stored: after an ambiguous commit, whether the submit transaction landed (its ids were chosen before it ran).
SELECT job_id FROM jobs WHERE job_id = ANY (CAST(:job_ids AS UUID[]));
