# Credentials come from the environment, never from this configuration: COCKROACH_API_KEY for
# CockroachDB Cloud, Application Default Credentials (or GOOGLE_CREDENTIALS) for Google Cloud.
provider "cockroach" {}

provider "google" {
  project = var.project_id
}

data "google_client_config" "current" {}

# One Helm provider per region, each talking to that region's GKE cluster. Provider blocks cannot be
# created with for_each, hence three explicit aliases (the regions are fixed at three).
provider "helm" {
  alias = "primary"
  kubernetes {
    host                   = "https://${module.cluster_primary.endpoint}"
    token                  = data.google_client_config.current.access_token
    cluster_ca_certificate = base64decode(module.cluster_primary.ca_certificate)
  }
}

provider "helm" {
  alias = "standby_a"
  kubernetes {
    host                   = "https://${module.cluster_standby_a.endpoint}"
    token                  = data.google_client_config.current.access_token
    cluster_ca_certificate = base64decode(module.cluster_standby_a.ca_certificate)
  }
}

provider "helm" {
  alias = "standby_b"
  kubernetes {
    host                   = "https://${module.cluster_standby_b.endpoint}"
    token                  = data.google_client_config.current.access_token
    cluster_ca_certificate = base64decode(module.cluster_standby_b.ca_certificate)
  }
}
