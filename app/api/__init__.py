"""The REST API (Litestar): a folder per resource, each a thin controller over its service.

Every /v1 route authenticates a tenant from ``Authorization: Bearer <key>`` (``auth``), runs
one transaction through the retry helper, and scopes every query by tenant: another tenant's
job id answers 404 exactly like an unknown one. Domain errors become RFC 9457 problem bodies
in one place (``problems``).

Resources (``controller``: the routes, ``service``: what they do, ``schemas``: the bodies):
``jobs`` (with ``submit``, the group-committing writer, and ``create_route``, POST /v1/jobs
answered in front of Litestar's router), ``dead_letters`` (and an execution's attempts and replay),
``schedules`` (previews) and ``stats`` (and /v1/status). What every body shares, the Wire base
and the field types whose bounds give both validation and the OpenAPI document, is ``wire``;
``bodies`` decodes strictly, ``openapi`` finishes the document, ``injected`` names the shared
objects handlers are given (``app.Shared`` builds them once per process).
"""
