"""/v1/schedules: the controller; what it does is app.api.schedules.service."""

from __future__ import annotations

from typing import Annotated
from zoneinfo import ZoneInfo

from litestar import Controller, get
from litestar.params import QueryParameter

from app.api.auth import DB, Tenant
from app.api.injected import SettingsDep
from app.api.jobs.schemas import DstIn, ScheduleOut
from app.api.jobs.service import utcnow
from app.api.schedules import schemas, service
from app.api.wire import NO_NUL
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.domain.jobs import EverySchedule
from app.domain.schedule.zone import MAX_TZ_LENGTH


class ScheduleController(Controller):
    path = "/v1/schedules"
    tags = ["schedules"]

    @get(
        "/preview",
        operation_id="PreviewSchedule",
        summary="The next N fire times of a cron expression in a zone, of an every interval, or of an existing "
        "job, with DST notes.",
    )
    async def preview(
        self,
        db: DB,
        tenant: Tenant,
        settings: SettingsDep,
        cron: Annotated[
            str | None,
            QueryParameter(
                schema_extra={"min_length": 1, "max_length": schedule_rules.MAX_CRON_LENGTH, "pattern": NO_NUL},
                description="5-field cron expression; required without jobId, replaces the job's with it",
            ),
        ] = None,
        tz: Annotated[
            str | None,
            QueryParameter(
                schema_extra={"min_length": 1, "max_length": MAX_TZ_LENGTH, "pattern": NO_NUL},
                description="IANA zone: required with cron unless jobId names a job, and replaces the job's; with "
                "every (whole days only) the zone whose wall-clock time the grid keeps",
            ),
        ] = None,
        count: Annotated[
            int,
            QueryParameter(
                description="how many fire times, 1-100", schema_extra={"minimum": 1, "maximum": service.PREVIEW_MAX}
            ),
        ] = 10,
        from_: Annotated[
            str | None,
            QueryParameter(
                name="from",
                schema_extra={"format": "date-time"},
                description="ISO 8601 instant with an offset; fire times strictly after it (default now)",
            ),
        ] = None,
        gap: Annotated[
            str | None,
            QueryParameter(
                schema_extra={"enum": ["shift", "skip"]},
                description="spring-forward gap: shift (run at the first valid instant after it) or skip",
            ),
        ] = None,
        repeat: Annotated[
            str | None,
            QueryParameter(
                schema_extra={"enum": ["once", "twice"]},
                description="fall-back repeat of a fixed-hour expression: once (the first instance) or twice",
            ),
        ] = None,
        jitter_seconds: Annotated[
            int | None,
            QueryParameter(
                name="jitterSeconds",
                schema_extra={"minimum": 0, "maximum": job_rules.MAX_JITTER_S},
                description="jitter window; fire times include the key's offset in it",
            ),
        ] = None,
        every: Annotated[
            str | None,
            QueryParameter(
                schema_extra={"min_length": 2, "pattern": "^([0-9]{1,9}d)?([0-9]{1,9}h)?([0-9]{1,9}m)?([0-9]{1,9}s)?$"},
                description="an interval such as 15m, 1h30m or 1d, instead of cron: its grid's instants (with tz, "
                "whole days at the anchor's wall-clock time in that zone, by the gap and repeat rules)",
            ),
        ] = None,
        start_at: Annotated[
            str | None,
            QueryParameter(
                name="startAt",
                schema_extra={"format": "date-time"},
                description="every only: the grid's anchor, ISO 8601 with an offset (default: one interval from "
                "now, as a job submitted now)",
            ),
        ] = None,
        job_id: Annotated[
            str | None,
            QueryParameter(
                name="jobId",
                schema_extra={"format": "uuid"},
                description="preview this job of the tenant: its stored expression, zone, DST policy, jitter and "
                "bounds, with its own H tokens and jitter offset",
            ),
        ] = None,
    ) -> schemas.PreviewOut:
        query = service.PreviewQuery(
            cron=cron,
            tz=tz,
            count=count,
            from_=from_,
            gap=gap,
            repeat=repeat,
            jitter_s=jitter_seconds,
            job_id=job_id,
            every=every,
            start_at=start_at,
        )
        limits = service.PreviewLimits(settings.max_schedule_horizon_days, settings.min_fire_interval_s)
        found = await service.preview(db, tenant.tenant_id, query, utcnow(), limits)
        s = found.schedule
        start_at_, end_at_ = (found.job.start_at, found.job.end_at) if found.job else (None, None)
        if isinstance(s, EverySchedule):
            zone = ZoneInfo(s.tz or "UTC")
            schedule = ScheduleOut(
                every=found.expr,
                anchor_at=s.anchor,
                tz=s.tz,
                jitter_seconds=s.jitter_s,
                dst=DstIn(gap=s.dst.gap, repeat=s.dst.repeat) if s.tz else None,
                start_at=start_at_,
                end_at=end_at_,
            )
        else:
            zone = ZoneInfo(s.tz)
            schedule = ScheduleOut(
                cron=found.expr,
                cron_resolved=s.expr,
                tz=s.tz,
                jitter_seconds=s.jitter_s,
                dst=DstIn(gap=s.dst.gap, repeat=s.dst.repeat),
                start_at=start_at_,
                end_at=end_at_,
            )
        return schemas.PreviewOut(
            fire_times=[
                schemas.FireTimeOut(
                    utc=o.run_at,
                    local=o.run_at.astimezone(zone).isoformat(),
                    dst_note=o.dst_note,
                    skipped=o.skipped,
                    nominal_utc=o.nominal_utc,
                )
                for o in found.occurrences
            ],
            schedule=schedule,
            jitter_offset_seconds=found.jitter_offset_s,
            job_id=str(found.job.job_id) if found.job else None,
        )
