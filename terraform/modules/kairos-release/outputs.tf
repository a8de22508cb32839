output "release" {
  description = "The release as namespace/name (for `helm -n NAMESPACE status NAME`)."
  value       = "${helm_release.kairos.namespace}/${helm_release.kairos.name}"
}

output "revision" {
  description = "Revision of the release after this apply."
  value       = helm_release.kairos.metadata[0].revision
}
