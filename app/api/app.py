"""The Litestar application factory."""

from __future__ import annotations

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig

from app.api import bodies, guards, openapi, problems
from app.api.auth import AuthThrottle, provide_db, provide_tenant
from app.api.dashboard import DashboardController
from app.api.dead_letters.controller import DeadLetterController
from app.api.health import DemoController, HealthController
from app.api.jobs.controller import JobController, create_jobs
from app.api.jobs.fast_submit import FastCreateJob
from app.api.jobs.submit import SubmitWriter, WriterConfig
from app.api.metrics import MetricsController
from app.api.openapi_ui import LocalSwaggerUI
from app.api.schedules.controller import ScheduleController
from app.api.stats.controller import StatsController, StatusController
from app.config import Settings
from app.store import Database, tenants
from app.store.payloads import PayloadStore


def controllers(settings: Settings) -> list[type]:
    found: list = [HealthController, JobController, create_jobs, ScheduleController, DeadLetterController]
    found.append(MetricsController)
    found += [StatsController, StatusController, DashboardController]
    if settings.demo:
        found.append(DemoController)
    return found


def max_body_bytes(settings: Settings) -> int:
    """A request body's limit (the batch route's is its own)."""
    return max(1024 * 1024, settings.payload_max_bytes + 64 * 1024)


def served_app(settings: Settings, db: Database) -> FastCreateJob:
    """What the API serves: the Litestar app, behind the single submit's own path (app.api.jobs.fast_submit)."""
    app = create_app(settings, db)
    return FastCreateJob(app, settings, db, key_cache=app.state.key_cache, throttle=app.state.auth_throttle,
                         writer=app.state.submit_writer, payloads=app.state.payloads,
                         max_body_bytes=max_body_bytes(settings))


def create_app(settings: Settings, db: Database) -> Litestar:
    writer = SubmitWriter(db, WriterConfig(herd_threshold=settings.herd_warning_threshold))
    app = Litestar(
        route_handlers=controllers(settings),
        # Litestar's default would replace the process's JSON log handler with its own text one.
        logging_config=None,
        dependencies={"db": Provide(provide_db), "tenant": Provide(provide_tenant)},
        exception_handlers=problems.HANDLERS,  # type: ignore[arg-type]
        # The method allowed for the path, OPTIONS answered, NUL refused in the query (app.api.guards).
        before_request=guards.before_request,
        # Every handler's data is decoded strictly from its bytes (app.api.bodies); responses as usual.
        dto=bodies.StrictBody, return_dto=None,
        state=State({"settings": settings, "db": db, "key_cache": tenants.KeyCache(), "submit_writer": writer,
                     "auth_throttle": AuthThrottle.from_settings(settings)}),
        on_shutdown=[writer.close],
        openapi_config=OpenAPIConfig(title="Kairos", version="1", path="/schema",
                                     render_plugins=[LocalSwaggerUI("/schema")],
                                     description="Distributed job scheduler: one-off jobs, cron schedules in a "
                                                 "time zone and interval (every) schedules, delivered to HTTP "
                                                 "endpoints or worker pools with retries and dead letters."),
        # A job's payload may be KAIROS_PAYLOAD_MAX_BYTES (docs/retention.md), plus the rest of its body.
        request_max_body_size=max_body_bytes(settings),
    )
    app.state.payloads = PayloadStore.from_settings(settings)  # large payloads (app.api.jobs.large_payloads)
    openapi.document(app)
    return app
