output "name" {
  description = "Name of the GKE cluster."
  value       = module.gke.name
}

output "endpoint" {
  description = "Address of the cluster's control plane (no scheme)."
  value       = module.gke.endpoint
  sensitive   = true
}

output "ca_certificate" {
  description = "Base64-encoded CA certificate of the cluster's control plane."
  value       = module.gke.ca_certificate
  sensitive   = true
}

output "nat_addresses" {
  description = "Static egress addresses of the cluster's nodes (for the CockroachDB Cloud allow list)."
  value       = google_compute_address.nat[*].address
}
