"""Structured logging and the OpenTelemetry metric instruments, defined once.

Logs are one JSON object per line on stderr (``KAIROS_LOG_FORMAT=json``, the default) carrying the
``extra={...}`` fields of each call, the process's ``service`` and ``pid``. Every logger goes
through that one handler: ours, uvicorn's, Litestar's (the app factory leaves logging alone),
grpc's, Python warnings and uncaught exceptions. Fields that hold credentials are never written
(:data:`SECRET_FIELDS`).

Metrics go through the OpenTelemetry SDK. :func:`setup_metrics` (called once per process by the
tier's start-up) installs the meter provider with a Prometheus reader, whose text
:func:`exposition` renders for ``/metrics``, and, when ``KAIROS_OTLP_ENDPOINT`` is set, a periodic
OTLP/HTTP exporter. The instruments below exist from import on; what is recorded before
:func:`setup_metrics` (or in a process that never calls it, such as a test) goes nowhere.

Names: each instrument's Prometheus name is its OpenTelemetry name with dots as underscores, the
unit (``_seconds``) and, for counters, ``_total`` appended: ``kairos.executions`` is
``kairos_executions_total``. Attributes are bounded: a tenant id at most (bounded by the number
of tenants), never a job or execution id.
"""

from app.observability._logs import (
    REDACTED,
    SECRET_FIELDS,
    JsonFormatter,
    TextFormatter,
    _log_uncaught_in_thread,
    log_many,
    setup_logging,
)
from app.observability._metrics import (
    EXPOSITION_CONTENT_TYPE,
    LAG_BUCKETS_S,
    OTLP_METRICS_PATH,
    REQUEST_BUCKETS_S,
    ObservedGauge,
    Reading,
    auth_throttled,
    breaker_state,
    dispatch_fenced,
    dispatch_lag,
    dispatched,
    executions,
    exposition,
    history_archived,
    http_request_duration,
    jobs_submitted,
    lease_expiries,
    lease_lost,
    leased,
    meter,
    queue_kind,
    quota_refusals,
    ready_queue_depth,
    setup_metrics,
    shards_owned,
    shutdown_metrics,
    start_lag,
    supervisor_restarts,
    tx_ambiguous,
    tx_retries,
)

__all__ = [
    "EXPOSITION_CONTENT_TYPE",
    "LAG_BUCKETS_S",
    "OTLP_METRICS_PATH",
    "REDACTED",
    "REQUEST_BUCKETS_S",
    "SECRET_FIELDS",
    "JsonFormatter",
    "ObservedGauge",
    "Reading",
    "TextFormatter",
    "_log_uncaught_in_thread",
    "auth_throttled",
    "breaker_state",
    "dispatch_fenced",
    "dispatch_lag",
    "dispatched",
    "executions",
    "exposition",
    "history_archived",
    "http_request_duration",
    "jobs_submitted",
    "lease_expiries",
    "lease_lost",
    "leased",
    "log_many",
    "meter",
    "queue_kind",
    "quota_refusals",
    "ready_queue_depth",
    "setup_logging",
    "setup_metrics",
    "shards_owned",
    "shutdown_metrics",
    "start_lag",
    "supervisor_restarts",
    "tx_ambiguous",
    "tx_retries",
]
