"""Job validation and retry maths: pure functions, no I/O."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from uuid import UUID, uuid4

import pytest

from app.domain import backoff, jobs, queues
from app.domain.shards import SHARD_COUNT, due_minute, shard_of
from app.errors import InvalidInput

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def test_instants_need_an_offset_and_are_normalised_to_utc() -> None:
    assert jobs.parse_instant("2026-10-16T11:00:00+02:00", "f") == datetime(2026, 10, 16, 9, tzinfo=timezone.utc)
    assert jobs.parse_instant("2026-10-16T09:00:00Z", "f") == datetime(2026, 10, 16, 9, tzinfo=timezone.utc)
    with pytest.raises(InvalidInput, match="offset"):
        jobs.parse_instant("2026-10-16T09:00:00", "f")


def test_once_schedule_bounds() -> None:
    assert jobs.once_schedule(None, 90, NOW, 3660).run_at == NOW + timedelta(seconds=90)
    assert jobs.once_schedule("2026-11-30T11:30:00Z", None, NOW, 3660).run_at < NOW  # runs at once
    with pytest.raises(InvalidInput) as past:
        jobs.once_schedule("2026-11-20T00:00:00Z", None, NOW, 3660)
    assert past.value.field == "schedule.runAt"
    with pytest.raises(InvalidInput):
        jobs.once_schedule(None, 400 * 86400, NOW, 365)


def test_targets() -> None:
    assert jobs.validate_target("queue", "emails.v2").ref == "emails.v2"
    for kind, ref in (
        ("http", "ftp://x"),
        ("http", "https://user:pw@host/"),
        ("queue", "-x"),
        ("queue", "a" * 64),
        ("sms", "x"),
    ):
        with pytest.raises(InvalidInput):
            jobs.validate_target(kind, ref)


def test_retry_defaults_and_bounds() -> None:
    policy = jobs.validate_retry(None, None, None)
    assert (policy.max_attempts, policy.backoff_s, policy.effective_max_backoff_s) == (5, 10.0, 3600.0)
    with pytest.raises(InvalidInput) as exc:
        jobs.validate_retry(3, 100, 50)
    assert exc.value.field == "retry.maxBackoffSeconds"


def test_queue_keys_keep_tenants_apart() -> None:
    a, b = uuid4(), uuid4()
    own, shared = jobs.Target("queue", "emails"), jobs.Target("queue", "shared/emails")
    assert jobs.queue_for(own, a) != jobs.queue_for(own, b)
    assert jobs.queue_for(own, a) == queues.tenant_queue(a, "emails")
    assert jobs.queue_for(shared, a) == jobs.queue_for(shared, b) == "shared:emails"
    assert jobs.queue_for(jobs.Target("http", "https://x"), a) == queues.HTTP_QUEUE
    assert (jobs.shared_pool_of(own), jobs.shared_pool_of(shared)) == (None, "emails")


@pytest.mark.parametrize(
    "ref", ["shared/", "shared/shared/x", "a/b", "-x", "x" * 64, "emails\n", "shared/emails\n", "Shared/emails"]
)
def test_a_pool_ref_names_one_namespace_or_is_refused(ref: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        jobs.validate_target("queue", ref)
    assert exc.value.field == "target.ref"


def test_a_pool_ref_parses_into_its_namespace() -> None:
    assert queues.parse_pool_ref("emails") == queues.PoolRef("emails", shared=False)
    assert queues.parse_pool_ref("shared/emails") == queues.PoolRef("emails", shared=True)
    assert str(queues.parse_pool_ref("shared/emails")) == "shared/emails"
    # "shared" alone is an ordinary pool name, as is any case but the exact prefix.
    assert queues.parse_pool_ref("shared") == queues.PoolRef("shared", shared=False)
    assert queues.parse_pool_ref("Shared/emails") is None
    assert queues.pool_of_queue(queues.shared_queue("emails")) == "shared/emails"
    assert queues.pool_of_queue(queues.tenant_queue(uuid4(), "emails")) == "emails"


def test_fingerprint_ignores_key_order_and_whitespace() -> None:
    assert jobs.request_fingerprint(b'{"a": 1, "b": [1,2]}') == jobs.request_fingerprint(b'{"b":[1,2],"a":1}')
    assert jobs.request_fingerprint(b'{"a": 1}') != jobs.request_fingerprint(b'{"a": 2}')


def test_backoff_follows_the_formula_with_bounded_jitter() -> None:
    rng = random.Random(7)
    for attempt, nominal in ((1, 10), (2, 20), (3, 40), (4, 80), (10, 300)):
        delay = backoff.retry_delay_s(attempt, 10, 300, rng=rng)
        assert nominal * (1 - backoff.JITTER) <= delay <= nominal
    assert backoff.retry_delay_s(1000, 10, 300, rng=rng) <= 300
    with pytest.raises(ValueError):
        backoff.retry_delay_s(0, 10, 300)


def test_shards_are_stable_and_spread() -> None:
    assert shard_of(UUID("12345678-1234-4234-8234-123456789abc")) == shard_of(
        UUID("12345678-1234-4234-8234-123456789abc")
    )
    counts = [0] * SHARD_COUNT
    for _ in range(25_600):
        counts[shard_of(uuid4())] += 1
    assert min(counts) > 40 and max(counts) < 180
    assert due_minute(datetime(2026, 1, 1, 9, 0, 59, 999, tzinfo=timezone.utc)) == datetime(
        2026, 1, 1, 9, 0, tzinfo=timezone.utc
    )


def test_first_occurrence_reports_dst_gap_skips_before_it() -> None:
    from app.domain import schedule as schedule_rules

    key = "00000000-0000-4000-8000-000000000001"
    before_gap = datetime(2026, 3, 8, 6, 0, tzinfo=timezone.utc)  # 01:00 EST on spring-forward day
    skip, resolved = jobs.cron_schedule("30 2 * * *", "America/New_York", None, "skip", None, key)
    first, skipped = jobs.first_occurrence(skip, resolved, before_gap, key, 3660)
    assert first.nominal_utc == datetime(2026, 3, 9, 6, 30, tzinfo=timezone.utc)  # 02:30 EDT the next day
    assert [o.reason for o in skipped] == ["dst_gap"] and skipped[0].nominal_utc < first.nominal_utc
    shift, resolved = jobs.cron_schedule("30 2 * * *", "America/New_York", None, "shift", None, key)
    first, skipped = jobs.first_occurrence(shift, resolved, before_gap, key, 3660)
    assert first.nominal_utc == datetime(2026, 3, 8, 7, 0, tzinfo=timezone.utc) and skipped == ()
    assert isinstance(first, schedule_rules.Occurrence)


def test_a_decoded_batch_item_fingerprints_like_the_same_body_sent_alone() -> None:
    raw = b'{"name": "r", "payload": {"b": [1, 2.5, null], "a": "\\u00e9"}, "schedule": {"delaySeconds": 90}}'
    import json

    assert jobs.value_fingerprint(json.loads(raw)) == jobs.request_fingerprint(raw)
    assert jobs.value_fingerprint({"name": "r"}) != jobs.request_fingerprint(raw)
