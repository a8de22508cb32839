-- Kairos schema, version 5: the indexes of leased executions are partial on lease_until IS NOT NULL
-- (the same rows: a CHECK ties lease_until to state 'leased') instead of state = 'leased'.
-- Heartbeat, complete, fail and defer find their rows by primary key and guard on
-- state = 'leased'; with the old predicate that guard also matched these small indexes, and with
-- statistics taken while nothing was leased the planner scanned every leased row once per input
-- row (a quadratic nested loop: ~65,000 comparisons per 128-item CompleteMany through a herd).
DROP INDEX IF EXISTS executions_leased;
DROP INDEX IF EXISTS executions_inflight;
CREATE INDEX IF NOT EXISTS executions_leased_until ON executions (lease_until) WHERE lease_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS executions_leased_by_queue ON executions (queue, tenant_id) WHERE lease_until IS NOT NULL;
