# One region: a VPC with one subnetwork, Cloud NAT for egress from private nodes, and a private
# regional GKE cluster (terraform-google-modules/kubernetes-engine, private-cluster submodule).

resource "google_compute_network" "this" {
  project                 = var.project_id
  name                    = var.name
  auto_create_subnetworks = false
  routing_mode            = "REGIONAL"
}

# Ingress is denied unless allowed: GKE adds its own allow rules (control plane to nodes, health
# checks) at a higher priority; this replaces the implied rule so that denials are logged.
resource "google_compute_firewall" "deny_ingress" {
  project   = var.project_id
  name      = "${var.name}-deny-ingress"
  network   = google_compute_network.this.id
  direction = "INGRESS"
  priority  = 65534

  deny {
    protocol = "all"
  }

  source_ranges = ["0.0.0.0/0"]

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_subnetwork" "nodes" {
  project                  = var.project_id
  name                     = "${var.name}-nodes"
  region                   = var.region
  network                  = google_compute_network.this.id
  ip_cidr_range            = var.cidrs.nodes
  private_ip_google_access = true

  secondary_ip_range {
    range_name    = "pods"
    ip_cidr_range = var.cidrs.pods
  }

  secondary_ip_range {
    range_name    = "services"
    ip_cidr_range = var.cidrs.services
  }

  log_config {
    aggregation_interval = "INTERVAL_5_SEC"
    flow_sampling        = 0.5
    metadata             = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_router" "nat" {
  project = var.project_id
  name    = "${var.name}-nat"
  region  = var.region
  network = google_compute_network.this.id
}

# Static egress addresses, so CockroachDB Cloud's allow list (sql_allowed_cidrs) can name them.
resource "google_compute_address" "nat" {
  count = 2

  project = var.project_id
  name    = "${var.name}-nat-${count.index}"
  region  = var.region
}

resource "google_compute_router_nat" "nat" {
  project                            = var.project_id
  name                               = "${var.name}-nat"
  router                             = google_compute_router.nat.name
  region                             = var.region
  nat_ip_allocate_option             = "MANUAL_ONLY"
  nat_ips                            = google_compute_address.nat[*].self_link
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"

  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}

module "gke" {
  #checkov:skip=CKV_TF_1:A Terraform Registry module pinned by a version constraint; the registry serves only released versions, and a commit hash would need a git source instead of the registry
  source  = "terraform-google-modules/kubernetes-engine/google//modules/private-cluster"
  version = "~> 36.0"

  project_id        = var.project_id
  name              = var.name
  region            = var.region
  regional          = true
  network           = google_compute_network.this.name
  subnetwork        = google_compute_subnetwork.nodes.name
  ip_range_pods     = "pods"
  ip_range_services = "services"

  release_channel            = "REGULAR"
  enable_private_nodes       = true
  enable_private_endpoint    = false
  master_ipv4_cidr_block     = var.cidrs.master
  master_authorized_networks = var.master_authorized_cidrs
  network_policy             = true
  http_load_balancing        = true
  horizontal_pod_autoscaling = true
  enable_shielded_nodes      = true
  deletion_protection        = true
  remove_default_node_pool   = true

  node_pools = [
    {
      name               = "kairos"
      machine_type       = var.machine_type
      min_count          = var.min_nodes_per_zone
      max_count          = var.max_nodes_per_zone
      disk_type          = "pd-balanced"
      disk_size_gb       = 100
      image_type         = "COS_CONTAINERD"
      auto_repair        = true
      auto_upgrade       = true
      enable_secure_boot = true
    },
  ]
}
