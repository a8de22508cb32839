-- kairos: postgresql-only
-- Kairos schema, version 21: the functions that partition history by week on PostgreSQL
-- (docs/database-at-scale.md, "Time-partitioned history"). 0022 calls them to convert the tables;
-- the history-partitions duty calls them to create partitions ahead and to drop expired ones.
-- CockroachDB keeps one table with row-level TTL (the overlay): there this file is recorded, not run,
-- and the named statements that call these functions have CockroachDB texts that do nothing.
--
-- Layout after 0022: executions and attempts are partitioned BY RANGE (scheduled_for), one partition
-- per UTC week (Monday 00:00 to Monday 00:00), named <table>_pYYYYMMDD after the week's Monday. The
-- tables as they were become the legacy partitions: executions_legacy holds the range before the
-- cutover (the first partitioned week), FROM (MINVALUE); attempts_legacy is the DEFAULT partition of
-- attempts (attempts written before 0020 have no scheduled_for, and NULL keys go to the default
-- partition only), kept below the cutover by a CHECK so creating a partition never scans it.
-- executions has no default partition: its partitions are ordered, so a job's newest execution
-- is read from the newest week down and the read stops at the first week that has one. Retention
-- empties the legacy partitions in batches as it always did, and drops whole weekly partitions.

-- One row: the first instant of the first weekly partition; rows before it stay in the default ones.
CREATE TABLE IF NOT EXISTS history_partitioning (
    only_row    BOOL        PRIMARY KEY DEFAULT true CHECK (only_row),
    cutover     TIMESTAMPTZ NOT NULL
);

-- Monday 00:00 UTC of the week holding p_at.
CREATE OR REPLACE FUNCTION kairos_history_week(p_at TIMESTAMPTZ) RETURNS TIMESTAMPTZ
LANGUAGE sql IMMUTABLE AS $$
    SELECT date_trunc('week', p_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
$$;

-- Run one DDL statement that takes a lock blocking writes on a hot table, waiting for that lock at
-- most 200 ms at a time: a lock request queued behind a long reader would hold every writer queued
-- behind it. Tries again after a short pause, up to p_tries times, then raises lock_not_available,
-- and the caller tries again in a new transaction (the migration runner does; the duty's next pass
-- does): this transaction may be what another one waits for (CREATE INDEX CONCURRENTLY waits for
-- every transaction older than it), so it must not wait forever.
CREATE OR REPLACE FUNCTION kairos_ddl_briefly(p_sql TEXT, p_tries INT DEFAULT 10) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_try INT := 0;
BEGIN
    LOOP
        v_try := v_try + 1;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE p_sql;
            PERFORM set_config('lock_timeout', '0', true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            IF v_try >= p_tries THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05 + random() * 0.2);
        END;
    END LOOP;
END
$$;

-- Whether history is partitioned already (0022 done).
CREATE OR REPLACE FUNCTION kairos_history_partitioned() RETURNS BOOL
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('executions')), false)
$$;

-- The weekly partition of p_table ('executions' or 'attempts') starting at p_lo (a Monday), created
-- if missing, with the storage parameters of the table's legacy partition (0017's autovacuum
-- settings). True when this call created it.
CREATE OR REPLACE FUNCTION kairos_history_partition_create(p_table TEXT, p_lo TIMESTAMPTZ) RETURNS BOOL
LANGUAGE plpgsql AS $$
DECLARE
    v_name TEXT := p_table || '_p' || to_char(p_lo AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_hi TIMESTAMPTZ := p_lo + INTERVAL '168 hours';
    v_options TEXT;
BEGIN
    IF p_table NOT IN ('executions', 'attempts') OR p_lo <> kairos_history_week(p_lo) THEN
        RAISE EXCEPTION USING MESSAGE = 'not a history partition: ' || p_table || ' from ' || p_lo;
    END IF;
    IF to_regclass(v_name) IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT array_to_string(reloptions, ', ') INTO v_options FROM pg_class WHERE oid = to_regclass(p_table || '_legacy');
    BEGIN
        PERFORM kairos_ddl_briefly('CREATE TABLE IF NOT EXISTS ' || quote_ident(v_name) || ' PARTITION OF '
                                   || quote_ident(p_table) || ' FOR VALUES FROM (' || quote_literal(p_lo) || ') TO ('
                                   || quote_literal(v_hi) || ')'
                                   || CASE WHEN v_options IS NULL OR v_options = '' THEN ''
                                           ELSE ' WITH (' || v_options || ')' END);
    EXCEPTION WHEN duplicate_table OR unique_violation THEN
        RETURN false;  -- another process created it at the same moment
    END;
    RETURN true;
END
$$;

-- Weekly partitions of both tables for every week from p_from to p_to (inclusive) that is not
-- before the cutover; how many partitions this call created.
CREATE OR REPLACE FUNCTION kairos_history_partitions_ensure(p_from TIMESTAMPTZ, p_to TIMESTAMPTZ) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    v_cutover TIMESTAMPTZ;
    v_week TIMESTAMPTZ;
    v_made INT := 0;
BEGIN
    IF NOT kairos_history_partitioned() THEN
        RETURN 0;
    END IF;
    SELECT cutover INTO v_cutover FROM history_partitioning;
    v_week := greatest(kairos_history_week(p_from), v_cutover);
    WHILE v_week <= p_to LOOP
        IF kairos_history_partition_create('executions', v_week) THEN
            v_made := v_made + 1;
        END IF;
        IF kairos_history_partition_create('attempts', v_week) THEN
            v_made := v_made + 1;
        END IF;
        v_week := v_week + INTERVAL '168 hours';
    END LOOP;
    RETURN v_made;
END
$$;

-- The weeks that have a partition of executions: their bounds, oldest first.
CREATE OR REPLACE FUNCTION kairos_history_partitions() RETURNS TABLE (lo TIMESTAMPTZ, hi TIMESTAMPTZ)
LANGUAGE sql STABLE AS $$
    SELECT w.lo, w.lo + INTERVAL '168 hours'
    FROM (SELECT CAST(to_date(substr(c.relname, length('executions_p') + 1), 'YYYYMMDD') AS TIMESTAMP) AT TIME ZONE 'UTC' AS lo
          FROM pg_inherits AS i
          JOIN pg_class AS c ON c.oid = i.inhrelid
          WHERE i.inhparent = to_regclass('executions') AND c.relname ~ '^executions_p[0-9]{8}$') AS w
    ORDER BY w.lo
$$;

-- Take the week starting p_lo out of history (its rows archived first by the caller): detach its
-- partitions of executions and attempts, and drop them unless the executions one still holds live
-- work or a row finished or restored at or after p_cutoff (a backfill, a replay or a restore since
-- the archive was read): then nothing changes and the answer is 'held'. Detached before the look,
-- so no row can arrive between the look and the drop. 'dropped', 'held', or 'absent' (no partition).
CREATE OR REPLACE FUNCTION kairos_history_partition_drop(p_lo TIMESTAMPTZ, p_cutoff TIMESTAMPTZ) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
    v_executions TEXT := 'executions_p' || to_char(p_lo AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_attempts TEXT := 'attempts_p' || to_char(p_lo AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_held BOOL;
BEGIN
    IF to_regclass(v_executions) IS NULL AND to_regclass(v_attempts) IS NULL THEN
        RETURN 'absent';
    END IF;
    BEGIN
        IF to_regclass(v_executions) IS NOT NULL THEN
            PERFORM kairos_ddl_briefly('ALTER TABLE executions DETACH PARTITION ' || quote_ident(v_executions));
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
        IF to_regclass(v_attempts) IS NOT NULL THEN
            PERFORM kairos_ddl_briefly('ALTER TABLE attempts DETACH PARTITION ' || quote_ident(v_attempts));
            EXECUTE 'DROP TABLE ' || quote_ident(v_attempts);
        END IF;
    EXCEPTION WHEN object_in_use THEN
        RETURN 'held';  -- the block's work is undone: both partitions stay attached
    END;
    RETURN 'dropped';
END
$$;

-- Conversion, step 1 (0022): fix the cutover (the Monday after next, or the week after the latest
-- scheduled_for held, if later) and add the CHECKs that keep the present tables below it, NOT VALID
-- (a catalogue change; the check of existing rows is step 2).
CREATE OR REPLACE FUNCTION kairos_history_prepare() RETURNS TIMESTAMPTZ
LANGUAGE plpgsql AS $$
DECLARE
    v_cutover TIMESTAMPTZ;
BEGIN
    SELECT cutover INTO v_cutover FROM history_partitioning;
    IF kairos_history_partitioned() THEN
        RETURN v_cutover;
    END IF;
    IF v_cutover IS NULL THEN
        SELECT greatest(kairos_history_week(now()) + INTERVAL '336 hours',
                        kairos_history_week(max(scheduled_for)) + INTERVAL '168 hours')
        INTO v_cutover FROM executions;
        INSERT INTO history_partitioning (cutover) VALUES (v_cutover) ON CONFLICT (only_row) DO NOTHING;
        SELECT cutover INTO v_cutover FROM history_partitioning;
    END IF;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('executions')
                       AND conname = 'executions_history_before') THEN
            PERFORM kairos_ddl_briefly('ALTER TABLE executions ADD CONSTRAINT executions_history_before '
                                       'CHECK (scheduled_for < ' || quote_literal(v_cutover) || ') NOT VALID');
        END IF;
    EXCEPTION WHEN duplicate_object THEN
        NULL;  -- a concurrent process added it
    END;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('attempts')
                       AND conname = 'attempts_history_before') THEN
            PERFORM kairos_ddl_briefly('ALTER TABLE attempts ADD CONSTRAINT attempts_history_before '
                                       'CHECK (scheduled_for IS NULL OR scheduled_for < ' || quote_literal(v_cutover)
                                       || ') NOT VALID');
        END IF;
    EXCEPTION WHEN duplicate_object THEN
        NULL;
    END;
    RETURN v_cutover;
END
$$;

-- Conversion, step 2: check the existing rows against the CHECK of p_table. VALIDATE CONSTRAINT reads
-- the table under SHARE UPDATE EXCLUSIVE, which blocks no write.
CREATE OR REPLACE FUNCTION kairos_history_validate(p_table TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF kairos_history_partitioned() THEN
        RETURN;
    END IF;
    EXECUTE 'ALTER TABLE ' || quote_ident(p_table) || ' VALIDATE CONSTRAINT ' || quote_ident(p_table || '_history_before');
EXCEPTION WHEN undefined_object THEN
    IF NOT kairos_history_partitioned() THEN  -- else a concurrent process swapped the tables meanwhile
        RAISE;
    END IF;
END
$$;

-- Conversion, step 3, in one transaction: rename both tables to <table>_legacy, create the
-- partitioned tables under the old names with the same columns, constraints and indexes (unique
-- indexes only where they hold the partition key: the old primary keys stay on the legacy partitions
-- alone), attach the old tables (executions for the range before the cutover, attempts as the
-- DEFAULT partition): every index matches one of theirs, so none is built, and the validated CHECKs
-- prove their rows fit, so none is read; then create the weekly partitions from the cutover on.
-- Only catalogue work under the locks: milliseconds, whatever the tables hold.
CREATE OR REPLACE FUNCTION kairos_history_swap() RETURNS BOOL
LANGUAGE plpgsql AS $$
DECLARE
    v_table TEXT;
    v_index RECORD;
    v_cutover TIMESTAMPTZ;
BEGIN
    IF kairos_history_partitioned() THEN
        RETURN false;
    END IF;
    SELECT cutover INTO v_cutover FROM history_partitioning;
    BEGIN
        PERFORM kairos_ddl_briefly('ALTER TABLE executions RENAME TO executions_legacy; '
                                   'ALTER TABLE attempts RENAME TO attempts_legacy');
    EXCEPTION WHEN duplicate_table THEN
        -- A concurrent process swapped them while this one waited for the lock: its "executions" is
        -- that process's partitioned table now.
        IF kairos_history_partitioned() THEN
            RETURN false;
        END IF;
        RAISE;
    END;
    FOREACH v_table IN ARRAY ARRAY['executions', 'attempts'] LOOP
        EXECUTE 'CREATE TABLE ' || quote_ident(v_table) || ' (LIKE ' || quote_ident(v_table || '_legacy')
                || ' INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (scheduled_for)';
        EXECUTE 'ALTER TABLE ' || quote_ident(v_table) || ' DROP CONSTRAINT ' || quote_ident(v_table || '_history_before');
        FOR v_index IN
            SELECT c.relname, pg_get_indexdef(i.indexrelid) AS def
            FROM pg_index AS i
            JOIN pg_class AS c ON c.oid = i.indexrelid
            WHERE i.indrelid = to_regclass(v_table || '_legacy')
              AND (NOT i.indisunique
                   OR (SELECT a.attnum FROM pg_attribute AS a
                       WHERE a.attrelid = i.indrelid AND a.attname = 'scheduled_for') = ANY (i.indkey))
            ORDER BY c.relname
        LOOP
            EXECUTE 'ALTER INDEX ' || quote_ident(v_index.relname) || ' RENAME TO '
                    || quote_ident(left(v_index.relname, 55) || '_legacy');
            EXECUTE regexp_replace(v_index.def, '^CREATE (UNIQUE )?INDEX \S+ ON \S+ ',
                                   'CREATE \1INDEX ' || quote_ident(v_index.relname) || ' ON ' || quote_ident(v_table) || ' ');
        END LOOP;
    END LOOP;
    EXECUTE 'ALTER TABLE executions ATTACH PARTITION executions_legacy FOR VALUES FROM (MINVALUE) TO ('
            || quote_literal(v_cutover) || ')';
    EXECUTE 'ALTER TABLE attempts ATTACH PARTITION attempts_legacy DEFAULT';
    PERFORM kairos_history_partitions_ensure(v_cutover, v_cutover + INTERVAL '168 hours');
    RETURN true;
END
$$;

-- A database that holds no history yet (a fresh installation, a benchmark's or a test's) may start
-- its weekly partitions earlier than 0022 chose: at p_cutover (a Monday), with the weeks from there
-- to two weeks ahead created. Refused when executions or attempts hold a row.
CREATE OR REPLACE FUNCTION kairos_history_recut(p_cutover TIMESTAMPTZ) RETURNS INT
LANGUAGE plpgsql AS $$
BEGIN
    IF p_cutover <> kairos_history_week(p_cutover) THEN
        RAISE EXCEPTION USING MESSAGE = 'a cutover is a Monday 00:00 UTC, not ' || p_cutover;
    END IF;
    IF EXISTS (SELECT 1 FROM executions) OR EXISTS (SELECT 1 FROM attempts) THEN
        RAISE EXCEPTION USING MESSAGE = 'history holds rows: its cutover stays where it is';
    END IF;
    EXECUTE 'ALTER TABLE executions DETACH PARTITION executions_legacy';
    EXECUTE 'ALTER TABLE executions_legacy DROP CONSTRAINT executions_history_before';
    EXECUTE 'ALTER TABLE executions_legacy ADD CONSTRAINT executions_history_before CHECK (scheduled_for < '
            || quote_literal(p_cutover) || ')';
    EXECUTE 'ALTER TABLE attempts_legacy DROP CONSTRAINT attempts_history_before';
    EXECUTE 'ALTER TABLE attempts_legacy ADD CONSTRAINT attempts_history_before CHECK (scheduled_for IS NULL '
            || 'OR scheduled_for < ' || quote_literal(p_cutover) || ')';
    UPDATE history_partitioning SET cutover = p_cutover;
    -- Weeks before the new cutover's are not history's any more (none holds a row).
    PERFORM kairos_history_partition_drop(w.lo, now()) FROM kairos_history_partitions() AS w WHERE w.lo < p_cutover;
    EXECUTE 'ALTER TABLE executions ATTACH PARTITION executions_legacy FOR VALUES FROM (MINVALUE) TO ('
            || quote_literal(p_cutover) || ')';
    RETURN kairos_history_partitions_ensure(p_cutover, now() + INTERVAL '336 hours');
END
$$;

-- The weekly partitions that rows scheduled at p_ats need (the weeks from the cutover on that have
-- none: a backfill, a catch-up or a restore into a week that retention dropped); how many this call
-- created. Rows before the cutover go to the default partitions.
CREATE OR REPLACE FUNCTION kairos_history_partitions_cover(p_ats TIMESTAMPTZ[]) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    v_week TIMESTAMPTZ;
    v_made INT := 0;
BEGIN
    IF NOT kairos_history_partitioned() THEN
        RETURN 0;
    END IF;
    FOR v_week IN
        SELECT DISTINCT kairos_history_week(a) FROM unnest(p_ats) AS a
        WHERE a >= (SELECT cutover FROM history_partitioning)
    LOOP
        IF to_regclass('executions_p' || to_char(v_week AT TIME ZONE 'UTC', 'YYYYMMDD')) IS NULL
           OR to_regclass('attempts_p' || to_char(v_week AT TIME ZONE 'UTC', 'YYYYMMDD')) IS NULL THEN
            v_made := v_made + kairos_history_partitions_ensure(v_week, v_week);
        END IF;
    END LOOP;
    RETURN v_made;
END
$$;
