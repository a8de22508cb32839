"""Limits that need no server: the minimum interval between fire times (KAIROS_MIN_FIRE_INTERVAL_S),
how the closest two fire times of a cron expression are measured, and the depth rules of bodies."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import msgspec
import pytest

from app import config, errors
from app.api import bodies
from app.api.jobs import schemas, service
from app.api.schedules import service as schedule_service
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
SETTINGS = config.load({})


def job(**schedule: Any) -> schemas.JobIn:
    return msgspec.convert({"name": "n", "target": {"type": "queue", "ref": "p"}, "schedule": schedule}, schemas.JobIn)


@pytest.mark.parametrize(
    ("expr", "seconds"),
    [
        ("* * * * *", 60),
        ("*/2 * * * *", 120),
        ("0,30 * * * *", 1800),
        ("0 * * * *", 3600),
        ("59 23 * * *", 86400),
        ("0 0,23 * * *", 3600),  # 23:00 then 00:00 the next day
        ("0 0,23 1 * *", 82800),  # the 1st only: never two days running, so 00:00 to 23:00
        ("0 9 * * 1-5", 86400),
        ("0 9 * * 1,3", 2 * 86400),  # never two days running: at least two days
        ("0 9 29 2 *", 2 * 86400),
        ("15,45 9 1,2 * *", 1800),
    ],
)
def test_the_closest_fire_times_of_an_expression(expr: str, seconds: int) -> None:
    assert schedule_rules.min_interval_s(expr, "key") == seconds


def test_the_default_allows_every_minute_and_ten_second_intervals() -> None:
    assert SETTINGS.min_fire_interval_s == 10
    service.build_spec(job(cron="* * * * *", tz="UTC"), SETTINGS, NOW)
    service.build_spec(job(every="10s"), SETTINGS, NOW)


def test_a_raised_minimum_refuses_closer_fire_times_naming_the_field() -> None:
    strict = replace(SETTINGS, min_fire_interval_s=300)
    service.build_spec(job(cron="*/5 * * * *", tz="UTC"), strict, NOW)
    service.build_spec(job(every="5m"), strict, NOW)
    for schedule, field in (
        ({"cron": "*/2 * * * *", "tz": "UTC"}, "schedule.cron"),
        ({"cron": "0,1 9 * * *", "tz": "UTC"}, "schedule.cron"),
        ({"every": "1m"}, "schedule.every"),
    ):
        with pytest.raises(errors.InvalidInput) as refused:
            service.build_spec(job(**schedule), strict, NOW)
        assert refused.value.field == field and ("300" in refused.value.detail or "5m" in refused.value.detail)


def test_seconds_are_never_a_cron_field() -> None:
    for expr in ("*/1 * * * * *", "* * * * * *"):
        with pytest.raises(errors.InvalidInput) as refused:
            service.build_spec(job(cron=expr, tz="UTC"), SETTINGS, NOW)
        assert "seconds" in refused.value.detail
    with pytest.raises(errors.InvalidInput):
        service.build_spec(job(every="1s"), SETTINGS, NOW)


def test_the_preview_applies_the_same_minimum() -> None:
    limits = schedule_service.PreviewLimits(min_interval_s=300)
    q = schedule_service.PreviewQuery(cron="*/2 * * * *", tz="UTC")
    with pytest.raises(errors.InvalidParameter) as refused:
        asyncio.run(schedule_service.preview(None, None, q, NOW, limits))  # type: ignore[arg-type]
    assert refused.value.field == "cron"


def test_the_setting_is_read_and_bounded() -> None:
    assert config.load({"KAIROS_MIN_FIRE_INTERVAL_S": "300"}).min_fire_interval_s == 300
    with pytest.raises(config.InvalidSetting):
        config.load({"KAIROS_MIN_FIRE_INTERVAL_S": "1"})


@pytest.mark.parametrize(
    ("raw", "limit", "path"),
    [
        (b"[[[]]]", 2, [0, 0]),
        (b'{"a": {"b": [1, {"c": []}]}}', 3, ["a", "b", 1]),
        (b'{"a": 1, "b\\"q": [[]]}', 2, ['b"q', 0]),
        (b'["x]", [["[["]]]', 2, [1, 0]),
        (b"[[]]", 2, None),
    ],
)
def test_the_path_to_what_nests_too_deeply(raw: bytes, limit: int, path: list | None) -> None:
    assert bodies.deepest_path(raw, limit) == path


def test_payload_depth_is_counted_without_recursion() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert job_rules.json_depth(deep, 64) == 65
    assert job_rules.json_depth({"a": [1, {"b": []}]}, 64) == 4
    with pytest.raises(errors.InvalidInput) as refused:
        job_rules.validate_payload(deep, 64 * 1024)
    assert refused.value.field == "payload"
