"""/v1/dead-letters and /v1/executions: list dead executions, replay them, read their attempts."""
