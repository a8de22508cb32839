"""Liveness and readiness probes."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Controller, Request, Response, get, post

from app.api.injected import DatabaseDep, SettingsDep
from app.store import health, migrate

log = logging.getLogger(__name__)


class HealthController(Controller):
    include_in_schema = True
    tags = ["health"]

    @get("/healthz", operation_id="Healthz", summary="The process is alive.")
    async def healthz(self, settings: SettingsDep) -> dict[str, str]:
        # Under `kairos up`, the run's token tells its supervisor this port is served by its own API.
        token = settings.supervisor_token
        return {"status": "ok", "supervisorToken": token} if token else {"status": "ok"}

    @get("/readyz", operation_id="Readyz", summary="The database is reachable and migrations are current.")
    async def readyz(self, db: DatabaseDep) -> Response[dict[str, object]]:
        try:
            await health.ping(db)
            pending = await migrate.pending(db)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the database means not ready
            return Response({"status": "unavailable", "database": str(exc)[:200]}, status_code=503)
        if pending:
            return Response({"status": "migrations pending", "pending": pending}, status_code=503)
        return Response({"status": "ready"})


class DemoController(Controller):
    """The demo job's HTTP target (only with `kairos up --demo`)."""

    include_in_schema = False

    @post("/demo/echo", status_code=200)
    async def echo(self, request: Request[Any, Any, Any]) -> dict[str, object]:
        body = await request.body()
        log.info(
            "demo job delivered",
            extra={
                "attempt": request.headers.get("kairos-attempt"),
                "job_id": request.headers.get("kairos-job-id"),
                "bytes": len(body),
            },
        )
        return {"received": len(body)}
