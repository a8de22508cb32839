variable "name" {
  description = "Name of the Helm release."
  type        = string
}

variable "namespace" {
  description = "Kubernetes namespace of the release (created when missing)."
  type        = string
}

variable "chart_path" {
  description = "Path of the helm/kairos chart in this repository."
  type        = string
}

variable "values_file" {
  description = "The region's values file: helm/kairos/examples/values-primary.yaml or values-standby.yaml."
  type        = string
}

variable "region" {
  description = "This release's region (the chart's region value, KAIROS_REGION)."
  type        = string
}

variable "primary_region" {
  description = "The region that holds the primary role (the chart's primaryRegion value, KAIROS_PRIMARY_REGION)."
  type        = string
}

variable "image" {
  description = "Repository and tag of the Kairos image."
  type = object({
    repository = string
    tag        = string
  })
}

variable "database_url" {
  description = "KAIROS_DATABASE_URL, stored in the chart's Secret."
  type        = string
  sensitive   = true
}

variable "database_ca" {
  description = "PEM CA certificate of the CockroachDB cluster, mounted at /etc/kairos/db-ca.crt."
  type        = string
}
