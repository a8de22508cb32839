variable "project_id" {
  description = "Google Cloud project that holds the three GKE clusters and their networks."
  type        = string
}

variable "name" {
  description = "Name prefix of every resource (CockroachDB cluster, networks, GKE clusters, Helm releases)."
  type        = string
  default     = "kairos"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{2,20}$", var.name))
    error_message = "name must be 3-21 lowercase letters, digits or dashes, starting with a letter."
  }
}

variable "primary_region" {
  description = "GCP region of the primary Kairos installation and the CockroachDB primary region (e.g. us-east1)."
  type        = string
  default     = "us-east1"
}

variable "standby_regions" {
  description = "The two other GCP regions: each gets a GKE cluster, a standby Kairos release and CockroachDB nodes. The first is the failover target of runbooks/region-failover.md."
  type        = list(string)
  default     = ["us-west1", "us-central1"]

  validation {
    condition     = length(var.standby_regions) == 2 && length(distinct(var.standby_regions)) == 2
    error_message = "standby_regions must name exactly two distinct regions."
  }
}

variable "cockroach_nodes_per_region" {
  description = "CockroachDB Cloud nodes in each of the three regions (3 or more to survive a zone loss inside a region)."
  type        = number
  default     = 3

  validation {
    condition     = var.cockroach_nodes_per_region >= 3
    error_message = "cockroach_nodes_per_region must be at least 3."
  }
}

variable "cockroach_vcpus_per_node" {
  description = "Virtual CPUs of each CockroachDB Cloud node."
  type        = number
  default     = 8
}

variable "cockroach_storage_gib" {
  description = "Storage of each CockroachDB Cloud node, in GiB."
  type        = number
  default     = 150
}

variable "cockroach_version" {
  description = "CockroachDB major version of the cluster (e.g. v25.2); null takes CockroachDB Cloud's default."
  type        = string
  default     = null
}

variable "backup_retention_days" {
  description = "How long CockroachDB Cloud keeps the managed backups that runbooks/database-restore.md restores from."
  type        = number
  default     = 30
}

variable "database_name" {
  description = "SQL database Kairos uses."
  type        = string
  default     = "kairos"
}

variable "database_user" {
  description = "SQL user Kairos connects as."
  type        = string
  default     = "kairos"
}

variable "database_password" {
  description = "Password of the Kairos SQL user (rotate with runbooks/key-rotation.md). Kept in Terraform state: use an encrypted state backend."
  type        = string
  sensitive   = true

  validation {
    condition     = length(var.database_password) >= 24
    error_message = "database_password must be at least 24 characters."
  }
}

variable "sql_allowed_cidrs" {
  description = "CIDRs allowed to reach the CockroachDB SQL port: the GKE clusters' NAT egress addresses (and nothing broader)."
  type        = list(string)
  default     = []
}

variable "gke_node_machine_type" {
  description = "Machine type of the Kairos node pool in every GKE cluster."
  type        = string
  default     = "e2-standard-4"
}

variable "gke_min_nodes_per_zone" {
  description = "Minimum nodes per zone of the Kairos node pool (the pool autoscales above it)."
  type        = number
  default     = 1
}

variable "gke_max_nodes_per_zone" {
  description = "Maximum nodes per zone of the Kairos node pool."
  type        = number
  default     = 5
}

variable "master_authorized_cidrs" {
  description = "CIDRs (name and block) allowed to reach the GKE control planes: the operators' and CI's addresses."
  type = list(object({
    cidr_block   = string
    display_name = string
  }))
  default = []
}

variable "network_cidrs" {
  description = "Per region: the node subnet, the pod range and the service range. Every region needs an entry; ranges must not overlap."
  type = map(object({
    nodes    = string
    pods     = string
    services = string
    master   = string
  }))
  default = {
    "us-east1"    = { nodes = "10.10.0.0/20", pods = "10.110.0.0/16", services = "10.210.0.0/20", master = "172.16.10.0/28" }
    "us-west1"    = { nodes = "10.20.0.0/20", pods = "10.120.0.0/16", services = "10.220.0.0/20", master = "172.16.20.0/28" }
    "us-central1" = { nodes = "10.30.0.0/20", pods = "10.130.0.0/16", services = "10.230.0.0/20", master = "172.16.30.0/28" }
  }
}

variable "kairos_image_repository" {
  description = "Container image repository of the Kairos image built from the repository's Dockerfile."
  type        = string
  default     = "us-docker.pkg.dev/kairos-prod/kairos/kairos"
}

variable "kairos_image_tag" {
  description = "Tag of the Kairos image to run in every region."
  type        = string
  default     = "0.1.0"
}

variable "kairos_namespace" {
  description = "Kubernetes namespace of the Kairos release in every cluster."
  type        = string
  default     = "kairos"
}
