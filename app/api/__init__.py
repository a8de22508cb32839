"""The REST API (Litestar): thin controllers over a service per resource.

Every /v1 route authenticates a tenant from ``Authorization: Bearer <key>`` (``auth``), runs
one transaction through the retry helper, and scopes every query by tenant: another tenant's
job id answers 404 exactly like an unknown one. Domain errors become RFC 9457 problem bodies
in one place (``problems``).
"""
