-- kairos: postgresql-only
-- Kairos schema, version 39: a database that holds no history yet starts its weekly partitions this
-- week. Version 22 sets the cutover at the Monday after next, so a fresh installation would write its
-- first two weeks of executions to the legacy partition, which keeps the old primary key
-- (execution_id) beside the occurrence key: one more unique index entry per execution than a weekly
-- partition, and a layout no database that has lived has. kairos_history_recut (0021) moves the
-- cutover back on empty tables (catalogue work: milliseconds). It is left where 0022 put it when
-- executions or attempts hold a row, and also when one arrives while this runs: recut's own refusal
-- (raise_exception), or a row of this week written before its detach took the table and then found
-- by the new CHECK (check_violation). Its locks are waited for at most 200 ms at a time
-- (kairos_ddl_briefly), so a reader in the way queues writers behind it for no longer; when it keeps them
-- from the recut for every try (lock_not_available), the cutover stays too. Either way the database
-- keeps 0022's layout, which retention handles as on any upgraded database.
DO $$
BEGIN
    IF (SELECT cutover FROM history_partitioning) > kairos_history_week(now())
       AND NOT EXISTS (SELECT 1 FROM executions) AND NOT EXISTS (SELECT 1 FROM attempts) THEN
        PERFORM kairos_ddl_briefly('SELECT kairos_history_recut(' || quote_literal(kairos_history_week(now())) || ')');
    END IF;
EXCEPTION WHEN raise_exception OR check_violation OR lock_not_available THEN
    NULL;  -- the block's work is undone: the cutover stays where 0022 put it
END
$$;
