-- kairos: no-transaction
-- Kairos schema, version 36: validate the concurrency CHECK version 32 added NOT VALID. VALIDATE reads
-- the jobs table under a lock that does not block writes (SHARE UPDATE EXCLUSIVE on PostgreSQL), and a
-- constraint already validated is validated again at no cost, so processes migrating at once may each run it.
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_concurrency_v32;
