variable "project_id" {
  description = "Google Cloud project of the network and the cluster."
  type        = string
}

variable "name" {
  description = "Name of the cluster; the network, subnetwork, router and NAT are named after it."
  type        = string
}

variable "region" {
  description = "GCP region of the regional cluster (its nodes spread over the region's zones)."
  type        = string
}

variable "cidrs" {
  description = "The node subnet, the pod and service secondary ranges, and the control plane's /28."
  type = object({
    nodes    = string
    pods     = string
    services = string
    master   = string
  })
}

variable "machine_type" {
  description = "Machine type of the Kairos node pool."
  type        = string
}

variable "min_nodes_per_zone" {
  description = "Minimum nodes per zone of the Kairos node pool."
  type        = number
}

variable "max_nodes_per_zone" {
  description = "Maximum nodes per zone of the Kairos node pool."
  type        = number
}

variable "master_authorized_cidrs" {
  description = "CIDRs allowed to reach the control plane's endpoint."
  type = list(object({
    cidr_block   = string
    display_name = string
  }))
}
