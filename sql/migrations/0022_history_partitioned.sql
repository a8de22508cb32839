-- kairos: postgresql-only
-- kairos: no-transaction
-- Kairos schema, version 22: executions and attempts partitioned by week on PostgreSQL, converted in
-- place while Kairos runs (the functions of 0021; docs/database-at-scale.md says how and why).
-- Each statement runs alone in autocommit and may run again after a crash (each step checks
-- what is done). The only work that reads the tables (the latest scheduled_for, the two CHECKs'
-- validation, the indexes) holds no lock that blocks writes; the locks that do (a NOT VALID CHECK,
-- the swap) are catalogue work, waited for at most 200 ms at a time.
--
-- The partitioned executions is unique on (execution_id, scheduled_for): the index the swap needs
-- on the old table, built first without blocking writes. Restored rows are found by their own
-- small index (retention keeps a week that holds a recent restore).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS executions_occurrence_key ON executions (execution_id, scheduled_for);
CREATE INDEX CONCURRENTLY IF NOT EXISTS executions_restored ON executions (restored_at) WHERE restored_at IS NOT NULL;
SELECT kairos_history_prepare();
SELECT kairos_history_validate('executions');
SELECT kairos_history_validate('attempts');
SELECT kairos_history_swap();
