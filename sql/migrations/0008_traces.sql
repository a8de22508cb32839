-- Kairos schema, version 8: trace context (W3C traceparent) on jobs and executions.
-- A job keeps its submit's; an execution keeps its occurrence's, which every attempt continues
-- and HTTP targets receive as the traceparent header (app/observability/tracing.py).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS traceparent TEXT;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS traceparent TEXT;
