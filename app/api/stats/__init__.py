"""/v1/stats and /v1/status: what a tenant (or the operator) sees of lag, outcomes, queues and shards."""
