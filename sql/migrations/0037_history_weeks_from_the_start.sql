-- kairos: postgresql-only
-- Kairos schema, version 37: a database that holds no history yet starts its weekly partitions this
-- week. Version 22 set the cutover at the Monday after next, so a fresh installation wrote its first
-- two weeks of executions to the legacy partition, which keeps the old primary key (execution_id)
-- beside the occurrence key: one more unique index entry per execution than a weekly partition, for
-- two weeks, and a layout no database that has lived has. kairos_history_recut (0021) moves the
-- cutover back; it refuses when executions or attempts hold a row, and then (a database with history,
-- or an execution written while this ran) the cutover stays where 0022 put it. A catalogue change on
-- empty tables: milliseconds.
DO $$
BEGIN
    IF (SELECT cutover FROM history_partitioning) > kairos_history_week(now())
       AND NOT EXISTS (SELECT 1 FROM executions) AND NOT EXISTS (SELECT 1 FROM attempts) THEN
        PERFORM kairos_history_recut(kairos_history_week(now()));
    END IF;
EXCEPTION WHEN raise_exception THEN
    NULL;  -- history arrived meanwhile: its cutover stays
END
$$;
