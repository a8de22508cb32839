-- name: ReplicationStandbyGet
-- PostgreSQL only (the local drills): a streaming standby of this server by application_name, with
-- the WAL bytes it has not flushed and not replayed yet.
SELECT state,
       sync_state,
       CAST(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn) AS BIGINT) AS flush_lag_bytes,
       CAST(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) AS BIGINT) AS replay_lag_bytes
FROM pg_stat_replication
WHERE application_name = :name;

-- name: ReplicationInRecovery
-- PostgreSQL only (the local drills): whether this server is a standby still replaying WAL.
SELECT pg_is_in_recovery() AS in_recovery;

-- name: ReplicationWalPosition
-- PostgreSQL only (the local drills): how far this server's WAL goes: written on a primary, received on a standby.
SELECT CAST(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END AS TEXT) AS lsn;
