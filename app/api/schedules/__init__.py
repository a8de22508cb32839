"""/v1/schedules: preview a schedule's fire times before submitting it."""
