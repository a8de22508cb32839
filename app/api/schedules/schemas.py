"""The bodies of /v1/schedules (camelCase on the wire)."""

from __future__ import annotations

from datetime import datetime

from app.api.jobs.schemas import ScheduleOut
from app.api.wire import Wire


class FireTimeOut(Wire):
    # When it runs: the nominal time plus the jitter offset, in UTC and as wall time in the zone.
    utc: datetime
    local: str
    dst_note: str | None
    skipped: bool
    nominal_utc: datetime


class PreviewOut(Wire):
    fire_times: list[FireTimeOut]
    # What was evaluated: the expression as given (or stored) and resolved, zone, DST policy, jitter.
    schedule: ScheduleOut
    # The key's slot in the jitter window: the job's own with jobId, a placeholder's without.
    jitter_offset_seconds: int
    job_id: str | None = None
