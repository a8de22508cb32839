-- CockroachDB multi-region overlay, part 2: a locality for every table (see 0001 for how it runs).
-- https://www.cockroachlabs.com/docs/stable/table-localities
--
-- GLOBAL: read in every region at local latency (non-blocking transactions), written rarely and
-- slowly (a write waits out the clock uncertainty, some hundreds of ms). Every API and executor
-- reads these on each request or lease: tenants and their quotas, API keys, shared pools and their
-- grants, the identity tokens' signing keys (read with each lease of a job that asks for a token, and
-- by /.well-known/jwks.json; written by a rotation), the migrations ledger (read by every process at
-- start).
-- https://www.cockroachlabs.com/docs/stable/global-tables
ALTER TABLE tenants SET LOCALITY GLOBAL;
ALTER TABLE api_keys SET LOCALITY GLOBAL;
ALTER TABLE pools SET LOCALITY GLOBAL;
ALTER TABLE pool_grants SET LOCALITY GLOBAL;
ALTER TABLE oidc_keys SET LOCALITY GLOBAL;
ALTER TABLE schema_migrations SET LOCALITY GLOBAL;

-- REGIONAL BY TABLE IN PRIMARY REGION for the hot tables. Kairos is active-passive: the schedulers
-- that own the shards run in the primary region, and the dispatch transaction touches due_index,
-- jobs and executions together, the lease and complete transactions executions and attempts
-- together. With all four homed in the primary region every such transaction reads and locks at
-- its leaseholders without leaving the region; only the commit's quorum crosses regions, as SURVIVE
-- REGION FAILURE requires of every write anyway. REGIONAL BY ROW (rows homed in a tenant's region)
-- was weighed for jobs: it would make a tenant's own reads of its jobs local in its region, but put
-- a remote leaseholder into the dispatch transaction of every job whose tenant lives elsewhere, on
-- the path the 2 s start-lag promise depends on. Reads that tolerate a few seconds of staleness
-- (history, attempts, dead letters, the dashboard) use follower reads instead and are local in
-- every region (app/store/db.py, Database.read).
-- https://www.cockroachlabs.com/docs/stable/regional-tables
ALTER TABLE jobs SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;
ALTER TABLE due_index SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;
ALTER TABLE executions SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;
ALTER TABLE attempts SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;
ALTER TABLE replay_budgets SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;

-- The schedulers' own coordination: renewed every second by the active region's schedulers, read by
-- the standby's, which take over only when these stop being renewed.
ALTER TABLE shard_leases SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;
ALTER TABLE scheduler_members SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION;
