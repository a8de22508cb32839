-- CockroachDB multi-region overlay, part 1: the database's regions and its survival goal.
-- Applied by `kairos db upgrade --cockroach-overlay` (app/store/overlay.py), after the migrations,
-- one statement at a time outside any explicit transaction (multi-region DDL refuses to run inside
-- one). Every statement is idempotent: the overlay is applied whole, every time. {database} and
-- the regions are rendered as quoted identifiers; "-- kairos: each-region" repeats the next
-- statement for every cluster region but the primary; "-- kairos: if secondary" keeps it only
-- when a secondary region is given. See docs/cockroachdb.md.
--
-- The primary region holds the leaseholders of every REGIONAL table (0002): the active schedulers
-- and the dispatch and lease transactions run there (KAIROS_PRIMARY_REGION), so their reads and
-- lock acquisitions are local.
-- https://www.cockroachlabs.com/docs/stable/alter-database#set-primary-region
ALTER DATABASE {database} SET PRIMARY REGION {primary_region};

-- Every other region of the cluster joins the database, so each holds replicas of every table.
-- https://www.cockroachlabs.com/docs/stable/alter-database#add-region
-- kairos: each-region
ALTER DATABASE {database} ADD REGION IF NOT EXISTS {region};

-- The standby region (where the passive schedulers run) takes the leaseholders when the primary
-- region is lost, so the schedulers that take over find their data local.
-- https://www.cockroachlabs.com/docs/stable/alter-database#set-secondary-region
-- kairos: if secondary
ALTER DATABASE {database} SET SECONDARY REGION {secondary_region};

-- Lose a whole region and keep every committed write and the ability to write (needs three
-- regions; each write waits for a quorum that spans regions, which is what makes it durable).
-- https://www.cockroachlabs.com/docs/stable/multiregion-survival-goals#survive-region-failures
ALTER DATABASE {database} SURVIVE REGION FAILURE;
