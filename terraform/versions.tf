terraform {
  required_version = ">= 1.6.0"

  required_providers {
    cockroach = {
      source  = "cockroachdb/cockroach"
      version = "~> 1.11"
    }
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 7.0"
    }
    helm = {
      source  = "hashicorp/helm"
      version = "~> 2.17"
    }
  }
}
