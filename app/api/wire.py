"""What every request and response body shares: camelCase on the wire, strict decoding, and the field
types that carry their bounds.

A field's bounds are declared here once, on its type, and give both the validation and the
OpenAPI document (app.api.openapi copies them into the schemas Litestar derives). Numeric ranges
are ``msgspec.Meta`` constraints: msgspec refuses a value outside them while decoding, and
app.api.bodies words the refusal as "must be between LOW and HIGH". Bounds whose refusal the
domain words more precisely (a name's NUL character, a label key's grammar, a header's value, a
method written in lower case) are validated by app.domain.jobs and declared here as document
only (``extra_json_schema``), from the same constants.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, TypeVar

import msgspec

from app.api import bodies
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


Name = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={
            "minLength": 1,
            "maxLength": job_rules.MAX_NAME_LEN,
            "pattern": "^[^\\u0000]*\\S[^\\u0000]*$",
        }
    ),
]
TargetType = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["http", "queue"]})]
TargetRef = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": job_rules.MAX_URL_LEN, "pattern": NO_NUL})
]
HttpMethod = Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(job_rules.HTTP_METHODS)})]
HeaderValue = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={
            "maxLength": job_rules.MAX_HEADER_VALUE_LEN,
            "pattern": f"^{job_rules.HEADER_VALUE.pattern}$",
        }
    ),
]
Headers = Annotated[
    dict[str, HeaderValue],
    msgspec.Meta(
        extra_json_schema={
            "maxProperties": job_rules.MAX_HEADERS,
            "propertyNames": {"pattern": f"^{job_rules.HEADER_NAME.pattern}$"},
        }
    ),
]
LabelValue = Annotated[
    str, msgspec.Meta(extra_json_schema={"maxLength": job_rules.MAX_LABEL_VALUE_LEN, "pattern": NO_NUL})
]
Labels = Annotated[
    dict[str, LabelValue],
    msgspec.Meta(
        extra_json_schema={
            "maxProperties": job_rules.MAX_LABELS,
            "propertyNames": {"pattern": job_rules.LABEL_KEY.pattern},
        }
    ),
]
DstGap = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["shift", "skip"]})]
DstRepeat = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["once", "twice"]})]
Cron = Annotated[
    str,
    msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": schedule_rules.MAX_CRON_LENGTH, "pattern": NO_NUL}),
]
Every = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": "^[0-9dhms]{1,40}$"})]
TimeZone = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": MAX_TZ_LENGTH, "pattern": NO_NUL})
]
Audience = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={
            "minLength": 1,
            "maxLength": job_rules.MAX_AUDIENCE_LEN,
            "pattern": f"^{job_rules.AUDIENCE.pattern}$",
        }
    ),
]
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
