-- name: HealthPing
-- The database answers.
SELECT 1 AS ok;
