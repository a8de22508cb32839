"""The Litestar application factory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

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
from app.api.jobs.create_route import ASGIApp, CreateJobRoute
from app.api.jobs.service import JobSubmitter
from app.api.jobs.submit import SubmitWriter, WriterConfig
from app.api.metrics import MetricsController
from app.api.openapi_ui import LocalSwaggerUI
from app.api.schedules.controller import ScheduleController
from app.api.stats.controller import StatsController, StatusController
from app.api.well_known import WellKnownController
from app.config import Settings
from app.store import Database, tenants
from app.store.payloads import PayloadStore


def controllers(settings: Settings) -> list[type]:
    found: list[Any] = [HealthController, JobController, create_jobs, ScheduleController, DeadLetterController]
    found.append(MetricsController)
    found += [StatsController, StatusController, DashboardController, WellKnownController]
    if settings.demo:
        found.append(DemoController)
    return found


def max_body_bytes(settings: Settings) -> int:
    """A request body's limit (the batch route's is its own)."""
    return max(1024 * 1024, settings.payload_max_bytes + 64 * 1024)


@dataclass(frozen=True)
class Shared:
    """The objects a process's requests share, each injected into handlers by its name and type."""

    settings: Settings
    key_cache: tenants.KeyCache
    auth_throttle: AuthThrottle
    submit_writer: SubmitWriter
    payload_store: PayloadStore
    submitter: JobSubmitter

    @classmethod
    def of(cls, settings: Settings, db: Database) -> Shared:
        writer = SubmitWriter(db, WriterConfig(herd_threshold=settings.herd_warning_threshold))
        payload_store = PayloadStore.from_settings(settings)  # large payloads (app.api.jobs.large_payloads)
        return cls(
            settings,
            tenants.KeyCache(),
            AuthThrottle.from_settings(settings),
            writer,
            payload_store,
            JobSubmitter(settings, writer, payload_store),
        )

    def dependencies(self) -> dict[str, Provide]:
        def given(value: object) -> Provide:
            def provide() -> object:
                return value

            return Provide(provide, use_cache=True, sync_to_thread=False)

        return {
            "settings": given(self.settings),
            "submit_writer": given(self.submit_writer),
            "payload_store": given(self.payload_store),
            "submitter": given(self.submitter),
        }


def create_app(settings: Settings, db: Database) -> Litestar:
    shared = Shared.of(settings, db)
    app = Litestar(
        route_handlers=controllers(settings),
        # Litestar's default would replace the process's JSON log handler with its own text one.
        logging_config=None,
        dependencies={"db": Provide(provide_db), "tenant": Provide(provide_tenant), **shared.dependencies()},
        exception_handlers=problems.HANDLERS,  # type: ignore[arg-type]
        # The method allowed for the path, OPTIONS answered, NUL refused in the query (app.api.guards).
        before_request=guards.before_request,
        # Every handler's data is decoded strictly from its bytes (app.api.bodies); responses as usual.
        dto=bodies.StrictBody,
        return_dto=None,
        # The guards and auth read these before any handler runs (app.api.guards, app.api.auth).
        state=State(
            {
                "settings": settings,
                "db": db,
                "key_cache": shared.key_cache,
                "shared": shared,
                "auth_throttle": shared.auth_throttle,
            }
        ),
        on_shutdown=[shared.submit_writer.close],
        openapi_config=OpenAPIConfig(
            title="Kairos",
            version="1",
            path="/schema",
            render_plugins=[LocalSwaggerUI("/schema")],
            description="Distributed job scheduler: one-off jobs, cron schedules in a "
            "time zone and interval (every) schedules, delivered to HTTP "
            "endpoints or worker pools with retries and dead letters.",
        ),
        # A job's payload may be KAIROS_PAYLOAD_MAX_BYTES (docs/retention.md), plus the rest of its body.
        request_max_body_size=max_body_bytes(settings),
    )
    openapi.document(app)
    # POST /v1/jobs is answered in front of the router (app.api.jobs.create_route), inside the app, so
    # whoever serves the app serves that route; the router keeps its declaration for the document.
    route = CreateJobRoute(
        cast(ASGIApp, app.asgi_handler),
        db,
        key_cache=shared.key_cache,
        throttle=shared.auth_throttle,
        submitter=shared.submitter,
        max_body_bytes=max_body_bytes(settings),
    )
    app.asgi_handler = cast(Any, route)
    return app
