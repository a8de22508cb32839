-- kairos: postgresql-only
-- Kairos schema, version 17: autovacuum and statistics for the hot tables (docs/database-at-scale.md).
-- PostgreSQL's storage parameters; CockroachDB has no VACUUM (its MVCC garbage collection and
-- automatic statistics are cluster settings), so there the file is recorded and not run.
--
-- PostgreSQL's defaults vacuum a table once a fifth of it is dead (autovacuum_vacuum_scale_factor
-- 0.2) and analyze it once a tenth has changed. That is sized for tables that change slowly; these
-- change all the time, and the longer they grow the longer they wait:
--
-- executions: every occurrence is inserted ready, updated when leased and again when it settles; the
-- state column is indexed (the partial ready and leased indexes), so no update is HOT and each leaves
-- a dead row and dead index entries. With 20 million rows of history the default waits for 4 million
-- dead rows, while the ready-queue and lease scans step over the dead entries of the live indexes.
-- Vacuum at a hundredth (200,000 at 20 million), with a larger cost budget so one pass keeps up with a herd;
-- inserts (history) trigger a vacuum at a twentieth so the visibility map stays current for index-only
-- scans; analyze at a fiftieth, so the window figures' ranges are estimated from the recent days.
ALTER TABLE executions SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
                            autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
                            autovacuum_vacuum_cost_limit = 2000);
-- due_index: a queue; every dispatch deletes an occurrence's row and inserts the next one, so the
-- whole table turns over once per fire interval. The scheduler's range scans of the next minutes
-- must not wade through dead rows: vacuum at a fiftieth.
ALTER TABLE due_index SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
                           autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_limit = 2000);
-- jobs: a recurring job's row is updated at each dispatch (its next occurrence), one-off jobs once
-- when done; vacuum at a twentieth.
ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
-- attempts: written once per attempt and deleted by retention only; vacuum for the visibility map
-- (insert-driven) and after retention's deletes, each at a twentieth.
ALTER TABLE attempts SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05,
                          autovacuum_analyze_scale_factor = 0.05);
