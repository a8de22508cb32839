-- Kairos schema, version 6: the earliest ready execution of a queue in one index probe.
-- A waiting Lease sleeps until then (work dispatched ahead is ready at its due time); an entry is
-- written when an execution becomes ready, not by the leases and completions of the drain.
CREATE INDEX IF NOT EXISTS executions_ready_at ON executions (queue, ready_at) WHERE state = 'ready';
