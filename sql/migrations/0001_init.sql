-- Kairos schema, version 1. Runs unchanged on PostgreSQL >= 15 and CockroachDB >= 24.1:
-- no sequences, no SERIAL, UUID v4 keys, partial indexes, CHECKs tying columns to states.
-- CockroachDB-only DDL (regions, hash sharding, row-level TTL) never goes in these portable files.

CREATE TABLE IF NOT EXISTS tenants (
    tenant_id            UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    name                 TEXT        NOT NULL UNIQUE,
    -- HMAC-SHA256 key for the Kairos-Signature header of HTTP targets.
    signing_secret       TEXT        NOT NULL,
    -- Quotas: fairness weight, ready executions one pool may hold leased at once,
    -- occurrences the scheduler dispatches per second before deferring the excess.
    weight               INT         NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    max_inflight         INT         NOT NULL DEFAULT 1000 CHECK (max_inflight > 0),
    max_dispatch_per_s   INT         NOT NULL DEFAULT 5000 CHECK (max_dispatch_per_s > 0),
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- API keys are stored only as SHA-256 hashes of high-entropy random tokens.
-- pool IS NULL: a tenant key (REST API and the tenant's own pools);
-- pool set: a worker key scoped to that shared pool (tenant_id is then NULL).
CREATE TABLE IF NOT EXISTS api_keys (
    key_hash    TEXT        PRIMARY KEY,
    tenant_id   UUID        REFERENCES tenants (tenant_id),
    pool        TEXT,
    label       TEXT        NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at  TIMESTAMPTZ,
    CHECK ((tenant_id IS NULL) <> (pool IS NULL))
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant_id);

-- Shared worker pools (operator-created). A tenant's own pools need no row.
CREATE TABLE IF NOT EXISTS pools (
    name        TEXT        PRIMARY KEY,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS pool_grants (
    pool        TEXT        NOT NULL REFERENCES pools (name),
    tenant_id   UUID        NOT NULL REFERENCES tenants (tenant_id),
    PRIMARY KEY (pool, tenant_id)
);

CREATE TABLE IF NOT EXISTS jobs (
    job_id              UUID        PRIMARY KEY,
    tenant_id           UUID        NOT NULL REFERENCES tenants (tenant_id),
    name                TEXT        NOT NULL,
    target_type         TEXT        NOT NULL CHECK (target_type IN ('http', 'queue')),
    target_ref          TEXT        NOT NULL,
    -- Canonical ready-queue key its executions go to: '@http', 'tenant:<uuid>:<pool>' or 'shared:<pool>'.
    queue               TEXT        NOT NULL,
    payload             JSONB       NOT NULL,
    schedule_kind       TEXT        NOT NULL CHECK (schedule_kind IN ('once', 'cron')),
    run_at              TIMESTAMPTZ,
    cron                TEXT,
    cron_resolved       TEXT,
    tz                  TEXT,
    jitter_s            INT         NOT NULL DEFAULT 0 CHECK (jitter_s >= 0),
    dst_gap             TEXT        NOT NULL DEFAULT 'shift' CHECK (dst_gap IN ('shift', 'skip')),
    dst_repeat          TEXT        NOT NULL DEFAULT 'once' CHECK (dst_repeat IN ('once', 'twice')),
    max_attempts        INT         NOT NULL CHECK (max_attempts >= 1),
    backoff_s           FLOAT8      NOT NULL CHECK (backoff_s >= 0),
    max_backoff_s       FLOAT8      NOT NULL CHECK (max_backoff_s >= backoff_s),
    timeout_s           INT         NOT NULL CHECK (timeout_s >= 1),
    concurrency         TEXT        NOT NULL DEFAULT 'allow' CHECK (concurrency IN ('allow', 'forbid', 'replace')),
    misfire             TEXT        NOT NULL DEFAULT 'run_once' CHECK (misfire IN ('run_once', 'catch_up', 'skip')),
    state               TEXT        NOT NULL CHECK (state IN ('active', 'paused', 'completed', 'cancelled')),
    -- The next nominal occurrence (before jitter) and when it runs; NULL once the schedule ended.
    next_nominal_at     TIMESTAMPTZ,
    next_run_at         TIMESTAMPTZ,
    first_run_at        TIMESTAMPTZ,
    paused_at           TIMESTAMPTZ,
    version             INT         NOT NULL DEFAULT 1,
    idempotency_key     TEXT,
    request_hash        TEXT,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((schedule_kind = 'once') = (run_at IS NOT NULL)),
    CHECK ((schedule_kind = 'cron') = (cron IS NOT NULL AND tz IS NOT NULL)),
    CHECK (state <> 'paused' OR paused_at IS NOT NULL),
    CHECK ((idempotency_key IS NULL) = (request_hash IS NULL)),
    UNIQUE (tenant_id, idempotency_key)
);
-- Listing: a tenant's jobs, newest first, keyset-paginated.
CREATE INDEX IF NOT EXISTS jobs_tenant_created ON jobs (tenant_id, created_at DESC, job_id DESC);

-- The next occurrence of every active job; the only thing schedulers scan.
-- shard_id = app.domain.shards.shard_of(job_id); due_minute = date_trunc('minute', next_run_at).
CREATE TABLE IF NOT EXISTS due_index (
    shard_id        INT         NOT NULL CHECK (shard_id >= 0 AND shard_id < 256),
    due_minute      TIMESTAMPTZ NOT NULL,
    next_run_at     TIMESTAMPTZ NOT NULL,
    job_id          UUID        NOT NULL,
    tenant_id       UUID        NOT NULL,
    -- The nominal occurrence (before jitter) this row stands for; becomes executions.scheduled_for.
    nominal_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (shard_id, due_minute, next_run_at, job_id)
);
-- One row per job: only the next occurrence exists.
CREATE UNIQUE INDEX IF NOT EXISTS due_index_job ON due_index (job_id);

CREATE TABLE IF NOT EXISTS executions (
    execution_id    UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    job_id          UUID        NOT NULL,
    tenant_id       UUID        NOT NULL,
    queue           TEXT        NOT NULL,
    scheduled_for   TIMESTAMPTZ NOT NULL,
    -- The fencing token: bumped by every lease; calls carrying another value change nothing.
    attempt         INT         NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- Absolute ceiling for attempt (a replay raises it; attempt itself never goes back).
    max_attempts    INT         NOT NULL CHECK (max_attempts >= 1),
    state           TEXT        NOT NULL CHECK (state IN ('ready', 'leased', 'succeeded', 'dead', 'cancelled', 'skipped')),
    ready_at        TIMESTAMPTZ NOT NULL,
    dispatched_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_owner     TEXT,
    lease_until     TIMESTAMPTZ,
    started_at      TIMESTAMPTZ,
    finished_at     TIMESTAMPTZ,
    error           TEXT,
    result          JSONB,
    skip_reason     TEXT        CHECK (skip_reason IN ('overlap', 'misfire', 'dst_gap')),
    -- Replay overrides (NULL: use the job's).
    payload         JSONB,
    backoff_s       FLOAT8,
    max_backoff_s   FLOAT8,
    UNIQUE (job_id, scheduled_for),
    CHECK ((state = 'leased') = (lease_until IS NOT NULL AND lease_owner IS NOT NULL)),
    CHECK ((state = 'skipped') = (skip_reason IS NOT NULL)),
    CHECK (state IN ('ready', 'leased') OR finished_at IS NOT NULL)
);
-- The per-pool ready queues.
CREATE INDEX IF NOT EXISTS executions_ready ON executions (queue, tenant_id, ready_at) WHERE state = 'ready';
-- The reaper's scan.
CREATE INDEX IF NOT EXISTS executions_leased ON executions (lease_until) WHERE state = 'leased';
-- History, newest first.
CREATE INDEX IF NOT EXISTS executions_job_history ON executions (job_id, scheduled_for DESC, execution_id DESC);
-- Dead letters per tenant.
CREATE INDEX IF NOT EXISTS executions_dead ON executions (tenant_id, finished_at DESC, execution_id DESC) WHERE state = 'dead';

-- One row per attempt (lease) of an execution, including discarded late results.
CREATE TABLE IF NOT EXISTS attempts (
    execution_id    UUID        NOT NULL,
    attempt         INT         NOT NULL CHECK (attempt >= 1),
    tenant_id       UUID        NOT NULL,
    worker_id       TEXT        NOT NULL,
    leased_at       TIMESTAMPTZ NOT NULL,
    lease_until     TIMESTAMPTZ NOT NULL,
    finished_at     TIMESTAMPTZ,
    outcome         TEXT        NOT NULL DEFAULT 'running'
                    CHECK (outcome IN ('running', 'succeeded', 'failed', 'expired', 'cancelled', 'discarded')),
    error           TEXT,
    PRIMARY KEY (execution_id, attempt)
);

-- Scheduler shard ownership; revision is the fencing token of dispatch transactions.
CREATE TABLE IF NOT EXISTS shard_leases (
    shard_id    INT         PRIMARY KEY CHECK (shard_id >= 0 AND shard_id < 256),
    owner       TEXT,
    lease_until TIMESTAMPTZ,
    revision    INT8        NOT NULL DEFAULT 0
);
INSERT INTO shard_leases (shard_id)
SELECT s FROM generate_series(0, 255) AS g (s)
ON CONFLICT (shard_id) DO NOTHING;
