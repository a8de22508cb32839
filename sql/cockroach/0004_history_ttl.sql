-- CockroachDB multi-region overlay, part 4: row-level TTL for execution history (see 0001 for how it
-- runs). A finished execution (and each ended attempt) expires KAIROS_RETENTION_DAYS plus one day
-- after it finished, so the history archiver (KAIROS_RETENTION_INTERVAL_S, every few
-- minutes) archives and deletes a row first and the TTL only removes what it could not reach for a
-- day. Rows still running have finished_at NULL, so the expression is NULL and they never expire.
-- With KAIROS_RETENTION_DAYS=0 (keep everything) the TTL is removed instead. CockroachDB has no
-- partition drop; a TTL job deletes in small batches at low priority, every hour (ttl_job_cron).
-- https://www.cockroachlabs.com/docs/stable/row-level-ttl
-- kairos: if retention
ALTER TABLE executions SET (ttl_expiration_expression = $$(finished_at + INTERVAL '{ttl_days} days')$$,
                            ttl_job_cron = '@hourly');
-- kairos: if retention
ALTER TABLE attempts SET (ttl_expiration_expression = $$(finished_at + INTERVAL '{ttl_days} days')$$,
                          ttl_job_cron = '@hourly');
-- kairos: unless retention
ALTER TABLE executions RESET (ttl);
-- kairos: unless retention
ALTER TABLE attempts RESET (ttl);
