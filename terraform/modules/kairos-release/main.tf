# One region's Kairos release: the region's values file, then what only Terraform knows (the region
# names, the image, the database CA and URL). The chart creates its Secret from the URL (the values
# files name an existing Secret instead, for installs without Terraform); the migration Job runs
# `kairos db upgrade` before any pod of a new revision starts.

resource "helm_release" "kairos" {
  name             = var.name
  namespace        = var.namespace
  create_namespace = true
  chart            = var.chart_path
  atomic           = true
  wait             = true
  timeout          = 900
  max_history      = 20

  values = [
    file(var.values_file),
    yamlencode({
      region        = var.region
      primaryRegion = var.primary_region
      image         = { repository = var.image.repository, tag = var.image.tag }
      secrets = {
        existingSecret = ""
        databaseCaKey  = "database-ca.crt"
        databaseCa     = var.database_ca
      }
    }),
  ]

  # Kept out of the plan's output (and given as --set, after the values above).
  set_sensitive {
    name  = "secrets.databaseUrl"
    value = var.database_url
  }
}
