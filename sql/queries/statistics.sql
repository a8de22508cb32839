-- name: StatisticsStaleTables
-- PostgreSQL only (CockroachDB refreshes its statistics by itself): the hot tables changed by at least :min_rows rows and :fraction of their size since they were last analyzed, and whose size moved by :fraction from the planner's belief (reltuples; -1 before the first ANALYZE). Updates that leave the size alone (a herd's leases and completions) make no new plans, and ANALYZE then only costs PostgreSQL's time in the drain. A partitioned table (executions, attempts) counts as the sum of its partitions (ANALYZE of it samples them all and analyzes each).
SELECT coalesce(p.relname, s.relname) AS relname
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
LEFT JOIN pg_inherits AS i ON i.inhrelid = s.relid
LEFT JOIN pg_class AS p ON p.oid = i.inhparent
WHERE s.schemaname = current_schema()
  AND c.relkind = 'r'
  AND coalesce(p.relname, s.relname) IN ('jobs', 'due_index', 'executions', 'attempts')
GROUP BY coalesce(p.relname, s.relname)
HAVING sum(s.n_mod_since_analyze) >= greatest(CAST(:min_rows AS INT8),
                                              CAST(:fraction AS FLOAT8) * sum(s.n_live_tup - s.n_mod_since_analyze))
   AND abs(sum(s.n_live_tup) - sum(greatest(c.reltuples, 0))) >= CAST(:fraction AS FLOAT8) * sum(greatest(c.reltuples, 0));

-- name: StatisticsTargetForTransaction
-- The statistics target of the ANALYZE that follows in this transaction (set_config(..., true) is SET LOCAL): ANALYZE samples 300 x target rows, so the keeper's refresh in the middle of a herd costs a tenth of the server default's 100.
SELECT set_config('default_statistics_target', CAST(:target AS TEXT), true);

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
