-- Kairos schema, version 12: the data lifecycle (docs/retention.md).
--
-- Large payloads by reference (the brief's jobs.payload_ref): a payload over KAIROS_PAYLOAD_INLINE_BYTES
-- is put in the object store first, then the job row holds its key (payloads/<tenant>/<sha256>.json)
-- and no inline payload. Exactly one of the two is set. Existing rows all have an inline payload.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS payload_ref TEXT;
ALTER TABLE jobs ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_payload_v12;
ALTER TABLE jobs ADD CONSTRAINT jobs_payload_v12 CHECK ((payload IS NULL) <> (payload_ref IS NULL));

-- Execution-history retention (the executors' RetentionPruner): finished executions older than
-- KAIROS_RETENTION_DAYS are found oldest first through this index. It is partial on finished_at, so
-- a lease or a heartbeat (finished_at NULL) never writes into it: each execution adds one entry, when
-- it finishes. On a large existing table create it by hand first, without blocking writes
-- (PostgreSQL: CREATE INDEX CONCURRENTLY; CockroachDB builds indexes online); IF NOT EXISTS then skips it.
CREATE INDEX IF NOT EXISTS executions_finished ON executions (finished_at) WHERE finished_at IS NOT NULL;

-- `kairos history restore` loads archived rows back into executions and attempts; restored_at marks
-- them, and the pruner leaves a restored execution alone for KAIROS_RETENTION_DAYS after its restore.
ALTER TABLE executions ADD COLUMN IF NOT EXISTS restored_at TIMESTAMPTZ;
