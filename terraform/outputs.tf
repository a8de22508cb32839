output "cockroach_cluster_id" {
  description = "CockroachDB Cloud cluster id (for `ccloud` and the CockroachDB Cloud console)."
  value       = cockroach_cluster.kairos.id
}

output "cockroach_regions" {
  description = "Regions of the CockroachDB cluster, the primary region first."
  value       = local.regions
}

output "database_url" {
  description = "KAIROS_DATABASE_URL every region's release uses (contains the SQL password)."
  value       = local.database_url
  sensitive   = true
}

output "gke_clusters" {
  description = "Per region: the GKE cluster name, for `gcloud container clusters get-credentials NAME --region REGION`."
  value = {
    (var.primary_region)     = module.cluster_primary.name
    (var.standby_regions[0]) = module.cluster_standby_a.name
    (var.standby_regions[1]) = module.cluster_standby_b.name
  }
}

output "helm_releases" {
  description = "Per region: the Kairos Helm release (namespace/name) and the role it was installed with."
  value = {
    (var.primary_region)     = { release = module.kairos_primary.release, role = "primary" }
    (var.standby_regions[0]) = { release = module.kairos_standby_a.release, role = "standby" }
    (var.standby_regions[1]) = { release = module.kairos_standby_b.release, role = "standby" }
  }
}
