# Kairos in three GCP regions on one multi-region CockroachDB Cloud cluster:
#
#   CockroachDB Cloud (ADVANCED, GCP): nodes in primary_region + both standby_regions, primary region
#   set to primary_region, managed backups.
#   Per region: a VPC subnetwork, a private regional GKE cluster, and a Helm release of helm/kairos:
#   primary values in primary_region, standby values in the other two.
#
# The tiers meet only in the database, so every region runs all of them against the same cluster;
# primaryRegion tells them which region leads (runbooks/region-failover.md moves it).

locals {
  regions = concat([var.primary_region], var.standby_regions)
  chart   = "${path.module}/../helm/kairos"
}

# -- CockroachDB Cloud --------------------------------------------------------------------------------

resource "cockroach_cluster" "kairos" {
  name              = "${var.name}-db"
  cloud_provider    = "GCP"
  plan              = "ADVANCED"
  cockroach_version = var.cockroach_version

  dedicated = {
    storage_gib      = var.cockroach_storage_gib
    num_virtual_cpus = var.cockroach_vcpus_per_node
  }

  regions = [
    for region in local.regions : {
      name       = region
      node_count = var.cockroach_nodes_per_region
      primary    = region == var.primary_region
    }
  ]

  backup_config = {
    enabled           = true
    frequency_minutes = 60
    retention_days    = var.backup_retention_days
  }

  delete_protection = true
}

resource "cockroach_allow_list" "gke" {
  for_each = toset(var.sql_allowed_cidrs)

  cluster_id = cockroach_cluster.kairos.id
  name       = "${var.name}-${replace(replace(each.value, ".", "-"), "/", "-")}"
  cidr_ip    = split("/", each.value)[0]
  cidr_mask  = tonumber(split("/", each.value)[1])
  sql        = true
  ui         = false
}

resource "cockroach_sql_user" "kairos" {
  cluster_id = cockroach_cluster.kairos.id
  name       = var.database_user
  password   = var.database_password
}

resource "cockroach_database" "kairos" {
  cluster_id = cockroach_cluster.kairos.id
  name       = var.database_name
}

data "cockroach_cluster_cert" "kairos" {
  id = cockroach_cluster.kairos.id
}

data "cockroach_connection_string" "kairos" {
  id       = cockroach_cluster.kairos.id
  sql_user = cockroach_sql_user.kairos.name
  password = var.database_password
  database = cockroach_database.kairos.name
}

locals {
  # KAIROS_DATABASE_URL: the cluster's connection string with Kairos's scheme, verifying the server
  # against the cluster CA the chart mounts at /etc/kairos/db-ca.crt.
  database_url = format(
    "cockroachdb://%s?sslmode=verify-full&sslrootcert=/etc/kairos/db-ca.crt",
    regex("^[a-z]+://([^?]*)", data.cockroach_connection_string.kairos.connection_string)[0],
  )
}

# -- One GKE cluster per region --------------------------------------------------------------------

module "cluster_primary" {
  source = "./modules/gke-region"

  project_id              = var.project_id
  name                    = "${var.name}-${var.primary_region}"
  region                  = var.primary_region
  cidrs                   = var.network_cidrs[var.primary_region]
  machine_type            = var.gke_node_machine_type
  min_nodes_per_zone      = var.gke_min_nodes_per_zone
  max_nodes_per_zone      = var.gke_max_nodes_per_zone
  master_authorized_cidrs = var.master_authorized_cidrs
}

module "cluster_standby_a" {
  source = "./modules/gke-region"

  project_id              = var.project_id
  name                    = "${var.name}-${var.standby_regions[0]}"
  region                  = var.standby_regions[0]
  cidrs                   = var.network_cidrs[var.standby_regions[0]]
  machine_type            = var.gke_node_machine_type
  min_nodes_per_zone      = var.gke_min_nodes_per_zone
  max_nodes_per_zone      = var.gke_max_nodes_per_zone
  master_authorized_cidrs = var.master_authorized_cidrs
}

module "cluster_standby_b" {
  source = "./modules/gke-region"

  project_id              = var.project_id
  name                    = "${var.name}-${var.standby_regions[1]}"
  region                  = var.standby_regions[1]
  cidrs                   = var.network_cidrs[var.standby_regions[1]]
  machine_type            = var.gke_node_machine_type
  min_nodes_per_zone      = var.gke_min_nodes_per_zone
  max_nodes_per_zone      = var.gke_max_nodes_per_zone
  master_authorized_cidrs = var.master_authorized_cidrs
}

# -- Kairos in every region ------------------------------------------------------------------------

module "kairos_primary" {
  source    = "./modules/kairos-release"
  providers = { helm = helm.primary }

  name           = var.name
  namespace      = var.kairos_namespace
  chart_path     = local.chart
  values_file    = "${local.chart}/examples/values-primary.yaml"
  region         = var.primary_region
  primary_region = var.primary_region
  image          = { repository = var.kairos_image_repository, tag = var.kairos_image_tag }
  database_url   = local.database_url
  database_ca    = data.cockroach_cluster_cert.kairos.cert
}

module "kairos_standby_a" {
  source    = "./modules/kairos-release"
  providers = { helm = helm.standby_a }

  name           = var.name
  namespace      = var.kairos_namespace
  chart_path     = local.chart
  values_file    = "${local.chart}/examples/values-standby.yaml"
  region         = var.standby_regions[0]
  primary_region = var.primary_region
  image          = { repository = var.kairos_image_repository, tag = var.kairos_image_tag }
  database_url   = local.database_url
  database_ca    = data.cockroach_cluster_cert.kairos.cert
}

module "kairos_standby_b" {
  source    = "./modules/kairos-release"
  providers = { helm = helm.standby_b }

  name           = var.name
  namespace      = var.kairos_namespace
  chart_path     = local.chart
  values_file    = "${local.chart}/examples/values-standby.yaml"
  region         = var.standby_regions[1]
  primary_region = var.primary_region
  image          = { repository = var.kairos_image_repository, tag = var.kairos_image_tag }
  database_url   = local.database_url
  database_ca    = data.cockroach_cluster_cert.kairos.cert
}
