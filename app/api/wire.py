"""What every request and response body shares: camelCase on the wire, strict decoding, and the field
types that carry their bounds.

A field's bounds are declared here once, on its type, and give both the validation and the
OpenAPI document (app.api.openapi copies them into the schemas Litestar derives). Ranges, lengths,
patterns and the values of a ``Literal`` are ``msgspec.Meta`` constraints: msgspec refuses a value
outside them while decoding, and app.api.bodies words the refusal ("must be between LOW and HIGH",
"must have at most N characters", "must be one of ..."; a pattern's refusal is the ``says`` of its
Meta ``extra``; a bad key of an object is pointed at by its own name, /labels/Team). What the
domain reads more loosely than a pattern could say (a method in lower case, an interval such as
1h30m) or checks beyond a pattern (reserved header names, a URL) is validated by app.domain.jobs and
app.domain.http_target, and its bounds are declared here as document only (``extra_json_schema``),
from the same constants.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, TypeVar

import msgspec

from app.api import bodies
from app.domain import http_target
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.domain.schedule.zone import MAX_TZ_LENGTH


class Wire(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=False):
    pass


W = TypeVar("W", bound=Wire)


def decode_body(raw: bytes, type_: type[W]) -> W:
    """An optional JSON body (empty means all defaults), decoded strictly: bad JSON is MalformedBody,
    JSON that breaks the schema InvalidInput naming the field (app.api.bodies)."""
    return bodies.decode(raw, type_, empty=type_)


NO_NUL = "^[^\\u0000]*$"  # PostgreSQL refuses NUL in text


NO_NUL_SAYS = "must not contain the NUL character (U+0000)"


def _text(max_length: int, *, pattern: str = NO_NUL, says: str = NO_NUL_SAYS) -> msgspec.Meta:
    """A non-empty string of at most ``max_length`` characters matching ``pattern`` (refused as ``says``)."""
    return msgspec.Meta(min_length=1, max_length=max_length, pattern=pattern, extra={"says": says})


Name = Annotated[
    str,
    _text(
        job_rules.MAX_NAME_LEN,
        pattern="^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$",
        says="must hold a character other than a space, and no NUL character (U+0000)",
    ),
]
TargetType = Literal["http", "queue"]
TargetRef = Annotated[str, _text(job_rules.MAX_URL_LEN)]
HttpMethod = Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(http_target.HTTP_METHODS)})]
HeaderName = Annotated[
    str,
    msgspec.Meta(
        pattern=f"^{http_target.HEADER_NAME.pattern}$",
        extra={"says": "is not a valid HTTP header name (RFC 9110 token: 1-128 of A-Z a-z 0-9 !#$%&'*+.^_`|~-)"},
    ),
]
HeaderValue = Annotated[
    str,
    msgspec.Meta(
        max_length=http_target.MAX_HEADER_VALUE_LEN,
        pattern=f"^{http_target.HEADER_VALUE.pattern}$",
        extra={
            "says": "a header value is visible ASCII characters, with spaces or tabs only between them "
            "(RFC 9110 field-value; no control or non-ASCII characters)"
        },
    ),
]
Headers = Annotated[dict[HeaderName, HeaderValue], msgspec.Meta(max_length=http_target.MAX_HEADERS)]
LabelKey = Annotated[
    str,
    msgspec.Meta(
        pattern=job_rules.LABEL_KEY.pattern,
        extra={"says": "a label key is 1-63 of a-z 0-9 . _ / - starting and ending with a letter or digit"},
    ),
]
LabelValue = Annotated[
    str, msgspec.Meta(max_length=job_rules.MAX_LABEL_VALUE_LEN, pattern=NO_NUL, extra={"says": NO_NUL_SAYS})
]
Labels = Annotated[dict[LabelKey, LabelValue], msgspec.Meta(max_length=job_rules.MAX_LABELS)]
DstGap = Literal["shift", "skip"]
DstRepeat = Literal["once", "twice"]
Cron = Annotated[str, _text(schedule_rules.MAX_CRON_LENGTH)]
Every = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": "^[0-9dhms]{1,40}$"})]
TimeZone = Annotated[str, _text(MAX_TZ_LENGTH)]
Audience = Annotated[
    str,
    _text(
        http_target.MAX_AUDIENCE_LEN,
        pattern=f"^{http_target.AUDIENCE.pattern}$",
        says=f"an audience is 1-{http_target.MAX_AUDIENCE_LEN} visible ASCII characters without spaces (a URL or "
        "another string the receiver expects)",
    ),
]
IDEMPOTENCY_KEY_MAX = 255  # characters of an Idempotency-Key (the header, or a batch item's idempotencyKey)
IdempotencyKey = Annotated[str, msgspec.Meta(min_length=1, max_length=IDEMPOTENCY_KEY_MAX)]
Uuid = Annotated[str, msgspec.Meta(extra_json_schema={"format": "uuid"})]

# Validated while decoding; app.api.bodies words a refusal "must be between LOW and HIGH" (``low_name``
# in ``extra``: the field named as the low end instead of a number).
MaxAttempts = Annotated[int, msgspec.Meta(ge=1, le=job_rules.MAX_ATTEMPTS)]
BackoffSeconds = Annotated[float, msgspec.Meta(ge=0, le=job_rules.MAX_BACKOFF_S)]
MaxBackoffSeconds = Annotated[
    float, msgspec.Meta(ge=0, le=job_rules.MAX_BACKOFF_S, extra={"low_name": "backoffSeconds"})
]
MaxRetryDurationSeconds = Annotated[float, msgspec.Meta(gt=0, le=job_rules.MAX_RETRY_DURATION_S)]
TimeoutSeconds = Annotated[int, msgspec.Meta(ge=1, le=job_rules.MAX_TIMEOUT_S)]
DelaySeconds = Annotated[float, msgspec.Meta(ge=0, le=job_rules.MAX_DELAY_S)]
JitterSeconds = Annotated[int, msgspec.Meta(ge=0, le=job_rules.MAX_JITTER_S)]
MaxRuns = Annotated[int, msgspec.Meta(ge=1, le=job_rules.MAX_RUNS)]
DeleteAfterSeconds = Annotated[int, msgspec.Meta(ge=0, le=job_rules.MAX_DELETE_AFTER_S)]


# An instant with its offset; a naive one is ambiguous and refused (msgspec's tz=True).
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]

# An ISO 8601 instant with an offset (2026-10-16T09:00:00Z), parsed by app.domain.jobs.parse_instant.
Instant = Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"}, examples=["2026-10-16T09:00:00Z"])]
