-- name: ServerVersion
-- The server's version string ("PostgreSQL 15.x ..." or "CockroachDB CCL v24.x ..."), and the database this connection uses.
SELECT version() AS version, current_database() AS database;
