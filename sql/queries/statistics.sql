-- name: StatisticsStaleTables
-- PostgreSQL only (CockroachDB refreshes its statistics by itself): the hot tables changed by at least :min_rows rows and :fraction of their size since they were last analyzed.
SELECT relname
FROM pg_stat_user_tables
WHERE schemaname = current_schema()
  AND relname IN ('jobs', 'due_index', 'executions', 'attempts')
  AND n_mod_since_analyze >= greatest(CAST(:min_rows AS INT8),
                                      CAST(:fraction AS FLOAT8) * (n_live_tup - n_mod_since_analyze));

-- name: StatisticsAnalyzeJobs
-- Refresh the planner statistics of jobs (one table per statement: only the stale ones are analyzed).
ANALYZE jobs;

-- name: StatisticsAnalyzeDueIndex
-- Refresh the planner statistics of due_index.
ANALYZE due_index;

-- name: StatisticsAnalyzeExecutions
-- Refresh the planner statistics of executions (a herd dispatched just before its due time would otherwise be leased with plans made for an empty ready queue).
ANALYZE executions;

-- name: StatisticsAnalyzeAttempts
-- Refresh the planner statistics of attempts.
ANALYZE attempts;
