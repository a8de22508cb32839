-- name: StatisticsStaleTables
-- PostgreSQL only (CockroachDB refreshes its statistics by itself): the hot tables changed by at least :min_rows rows and :fraction of their size since they were last analyzed.
SELECT relname
FROM pg_stat_user_tables
WHERE schemaname = current_schema()
  AND relname IN ('jobs', 'due_index', 'executions', 'attempts')
  AND n_mod_since_analyze >= greatest(CAST(:min_rows AS INT8),
                                      CAST(:fraction AS FLOAT8) * (n_live_tup - n_mod_since_analyze));

-- name: StatisticsAnalyzeHotTables
-- Refresh planner statistics of the hot tables (a herd inserted just before its due time would otherwise be leased with plans made for an empty ready queue).
ANALYZE jobs, due_index, executions, attempts;
