-- CockroachDB-only statements (app/store/queries.py: a name that sql/queries does not have).

-- name: TransactionFollowerRead
-- CockroachDB only: read this read-only transaction at follower_read_timestamp() (a few seconds back), so the nearest replica, in this region, answers; it must be the transaction's first statement.
SET TRANSACTION AS OF SYSTEM TIME follower_read_timestamp();

-- name: OverlayClusterRegions
-- CockroachDB only: the regions the cluster's nodes were started in (--locality region=...), which the overlay makes the database's regions.
WITH r AS (SHOW REGIONS FROM CLUSTER) SELECT region FROM r ORDER BY region;
