-- kairos: postgresql-only
-- Kairos schema, version 38: retiring a week takes its locks together. Version 21's
-- kairos_history_partition_drop detached the week's executions partition (ACCESS EXCLUSIVE on
-- executions, held to the end of its transaction) and only then waited, up to ten times 200 ms, for
-- the lock that detaching the attempts partition needs: while a reader of attempts held that one up,
-- every statement on executions (every dispatch, lease and outcome) waited behind the first lock, for
-- seconds, and the pass could still fail. Now both detaches are one try under the 200 ms bound, all or
-- none, and the look and the drops run after them without waiting.
CREATE OR REPLACE FUNCTION kairos_history_partition_drop(p_lo TIMESTAMPTZ, p_cutoff TIMESTAMPTZ) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
    v_executions TEXT := 'executions_p' || to_char(p_lo AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_attempts TEXT := 'attempts_p' || to_char(p_lo AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_has_executions BOOL := to_regclass(v_executions) IS NOT NULL;
    v_has_attempts BOOL := to_regclass(v_attempts) IS NOT NULL;
    v_held BOOL;
BEGIN
    IF NOT v_has_executions AND NOT v_has_attempts THEN
        RETURN 'absent';
    END IF;
    BEGIN
        -- Both detaches in one try of kairos_ddl_briefly: when the second's lock is not granted within
        -- 200 ms, the try is undone, the first's lock let go with it, and the pair is tried again.
        PERFORM kairos_ddl_briefly(concat_ws('; ',
            CASE WHEN v_has_executions THEN 'ALTER TABLE executions DETACH PARTITION ' || quote_ident(v_executions) END,
            CASE WHEN v_has_attempts THEN 'ALTER TABLE attempts DETACH PARTITION ' || quote_ident(v_attempts) END));
        IF v_has_executions THEN
            EXECUTE 'SELECT EXISTS (SELECT 1 FROM ' || quote_ident(v_executions) || ' WHERE state = ''ready'')'
                    || ' OR EXISTS (SELECT 1 FROM ' || quote_ident(v_executions) || ' WHERE lease_until IS NOT NULL)'
                    || ' OR EXISTS (SELECT 1 FROM ' || quote_ident(v_executions)
                    || ' WHERE finished_at IS NOT NULL AND finished_at >= $1)'
                    || ' OR EXISTS (SELECT 1 FROM ' || quote_ident(v_executions)
                    || ' WHERE restored_at IS NOT NULL AND restored_at >= $1)'
                INTO v_held USING p_cutoff;
            IF v_held THEN
                RAISE EXCEPTION USING ERRCODE = 'object_in_use', MESSAGE = 'history week held: ' || v_executions;
            END IF;
            EXECUTE 'DROP TABLE ' || quote_ident(v_executions);
        END IF;
        IF v_has_attempts THEN
            EXECUTE 'DROP TABLE ' || quote_ident(v_attempts);
        END IF;
    EXCEPTION WHEN object_in_use THEN
        RETURN 'held';  -- the block's work is undone (its locks let go): both partitions stay attached
    END;
    RETURN 'dropped';
END
$$;
