"""/v1/stats/* (the dashboard's panels) and /v1/status (`kairos status`): the controllers.

Read-only. Each route takes a ``viewer`` (app.api.viewer): a tenant key sees that tenant's
figures, the operator's admin token every tenant's or, with ``?tenant=<name>``, one tenant's.
What each route computes is app.api.stats.service; the bodies are app.api.stats.schemas.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import Provide
from litestar.params import QueryParameter

from app.api.auth import DB
from app.api.stats import schemas, service
from app.api.viewer import ViewerDep, provide_viewer

VIEWER = {"viewer": Provide(provide_viewer)}


# Checked by the service, which words the refusal; documented here.
WindowMinutes = Annotated[
    int | None, QueryParameter(schema_extra={"minimum": 1, "maximum": service.MAX_WINDOW_MINUTES})
]
HorizonHours = Annotated[int | None, QueryParameter(schema_extra={"minimum": 1, "maximum": service.MAX_HORIZON_HOURS})]


class StatsController(Controller):
    path = "/v1/stats"
    tags = ["stats"]
    dependencies = VIEWER

    @get(
        "/lag",
        operation_id="GetStartLag",
        summary="Start lag (first attempt's lease - scheduledFor) and dispatch lag p50/p99 per minute of the "
        "last `minutes` (default 60, at most 1440).",
    )
    async def lag(self, db: DB, viewer: ViewerDep, minutes: WindowMinutes = None) -> schemas.LagOut:
        return await service.start_lag(db, viewer, minutes)

    @get(
        "/outcomes",
        operation_id="GetOutcomes",
        summary="Per minute of scheduledFor: occurrences succeeded, dead, retried (failed or lost, then tried "
        "again), leases lost, and the failure rate (dead + retried) / (succeeded + dead + retried).",
    )
    async def outcomes(self, db: DB, viewer: ViewerDep, minutes: WindowMinutes = None) -> schemas.OutcomesOut:
        return await service.outcomes(db, viewer, minutes)

    @get(
        "/queues",
        operation_id="GetQueueDepths",
        summary="Ready (due now, or later) and leased executions per pool, and the dead-letter count.",
    )
    async def queues(self, db: DB, viewer: ViewerDep) -> schemas.QueuesOut:
        return await service.queues(db, viewer)

    @get(
        "/due",
        operation_id="GetDueHistogram",
        summary="Occurrences due per minute over the next `hours` (default 6, at most 24): due_index rows plus "
        "executions already dispatched ahead or waiting for a retry.",
    )
    async def due(self, db: DB, viewer: ViewerDep, hours: HorizonHours = None) -> schemas.DueOut:
        return await service.due(db, viewer, hours)

    @get(
        "/tenants",
        operation_id="ListStatsTenants",
        summary="The operator's admin token only: every tenant's name, for ?tenant=.",
    )
    async def tenants(self, db: DB, viewer: ViewerDep) -> schemas.TenantsOut:
        return await service.tenant_names(db, viewer)


class StatusController(Controller):
    path = "/v1/status"
    tags = ["stats"]
    dependencies = VIEWER

    @get(
        "/",
        operation_id="GetStatus",
        summary="Shards owned (per scheduler for the operator), queue depths, start lag p50/p99 of the last "
        "5 minutes and the dead-letter count: what `kairos status` shows.",
    )
    async def status(self, db: DB, viewer: ViewerDep) -> schemas.StatusOut:
        return await service.status(db, viewer)
