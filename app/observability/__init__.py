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

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import msgspec
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

# Record attributes that are not fields; uvicorn's color_message repeats msg with terminal escapes.
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName",
                                                                         "color_message"}
# Extra fields that would carry a credential: written as "[redacted]" whoever passes them.
SECRET_FIELDS = frozenset({"authorization", "api_key", "key", "signing_secret", "secret", "token", "password",
                           "worker_key"})
REDACTED = "[redacted]"


def _redacted(fields: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return {k: (REDACTED if k.lower() in SECRET_FIELDS else v) for k, v in fields}


# Field names that need no redaction, whatever their case: a row of only these is written as it is.
_SAFE_FIELDS = frozenset({"execution_id", "job_id", "tenant_id", "attempt", "outcome", "lag_ms", "delay_s",
                          "error", "queue", "pool"})


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return _redacted((k, v) for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_"))


class TextFormatter(logging.Formatter):
    """Human-readable lines (`kairos up`'s own output) that still carry the structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        return f"{line} {fields}" if fields else line


class JsonFormatter(logging.Formatter):
    """One JSON object per record. Cheap on purpose: the executor writes a line per outcome and the API
    one per request, so at a herd's 10,000+/s every microsecond here is a share of a core (msgspec
    encodes, the second's timestamp prefix is cached: 6.7 us a line, from 11.6)."""

    def __init__(self, service: str = "kairos") -> None:
        super().__init__()
        self.service = service
        self.pid = os.getpid()
        encoder = msgspec.json.Encoder(enc_hook=str)  # UUIDs and datetimes natively, anything else as str()
        self._encode, self._encode_lines = encoder.encode, encoder.encode_lines
        self._second = -1
        self._prefix = ""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return self.line(record.created, record.levelname, record.name, record.getMessage(), _extras(record), exc)

    def _head(self, created: float, level: str, logger: str, message: str) -> dict[str, Any]:
        second = int(created)
        if second != self._second:
            self._second, self._prefix = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return {
            "ts": f"{self._prefix}.{int((created - second) * 1000):03d}Z",
            "level": level.lower(),
            "logger": logger,
            "msg": message,
            "service": self.service,
            "pid": self.pid,
        }

    def line(self, created: float, level: str, logger: str, message: str, fields: Mapping[str, Any],
             exc: str | None = None) -> str:
        """One record's JSON object from its parts (``fields`` already redacted)."""
        out = self._head(created, level, logger, message)
        out.update(fields)
        if exc is not None:
            out["exc"] = exc
        return self._encode(out).decode()

    def lines(self, created: float, level: str, logger: str, message: str,
              rows: Iterable[Mapping[str, Any]]) -> str:
        """A record per row, one JSON object a line, each ended by a newline: what :meth:`line` writes
        for each (``rows`` redacted here), encoded in one call."""
        head = self._head(created, level, logger, message)
        objects = []
        for row in rows:
            out = head.copy()
            out.update(row if _SAFE_FIELDS.issuperset(row) else _redacted(row.items()))
            objects.append(out)
        return self._encode_lines(objects).decode()


def _json_handlers(logger: logging.Logger, level: int) -> list[logging.StreamHandler[Any]] | None:
    """The handlers a record of ``logger`` at ``level`` reaches, when each is a plain JSON stream
    handler and nothing filters on the way (so :func:`log_many` may write the lines itself)."""
    found: list[logging.StreamHandler[Any]] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for h in current.handlers:
            if type(h) is not logging.StreamHandler or not isinstance(h.formatter, JsonFormatter) or h.filters:
                return None
            if level >= h.level:
                found.append(h)
        if not current.propagate:
            break
        current = current.parent
    return found


def log_many(logger: logging.Logger, level: int, message: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """A record per row (its extra fields), as ``logger.log(level, message, extra=row)`` would write
    each, but in one write per handler: the executor's outcome lines of a whole batch."""
    if not logger.isEnabledFor(level):
        return
    handlers = _json_handlers(logger, level)
    if handlers is None:  # a test's capture handler, the text format: one record at a time
        for row in rows:
            logger.log(level, message, extra=dict(row))
        return
    if not handlers:
        return
    rows = list(rows)
    created, name, levelname = time.time(), logger.name, logging.getLevelName(level)
    for h in handlers:
        formatter = h.formatter
        assert isinstance(formatter, JsonFormatter)
        text = formatter.lines(created, levelname, name, message, rows)
        if h.terminator != "\n":  # a newline in JSON text only ends a line: strings escape theirs
            text = text.replace("\n", h.terminator)
        h.acquire()
        try:
            h.stream.write(text)
            h.flush()
        finally:
            h.release()


# Loggers of libraries that configure their own output unless told not to: their records are
# routed to the root handler (propagate, no handlers of their own).
_ROUTED = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "litestar", "grpc", "asyncio",
           "py.warnings")


def setup_logging(level: str = "INFO", fmt: str = "json", process: str = "kairos") -> None:
    # Nothing reads the caller's file and line, thread or process name from a record: not computing
    # them halves what a record costs (the formatter writes the pid itself).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        handler.setFormatter(TextFormatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _ROUTED:
        routed = logging.getLogger(name)
        routed.handlers[:] = []
        routed.propagate = True
    for noisy in ("uvicorn.access", "httpx", "httpcore", "grpc", "pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("kairos").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None:
        logging.getLogger("kairos").critical(
            "uncaught exception in a thread", exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
            extra={"thread_name": getattr(args.thread, "name", None)})


# -- metrics: the provider, Prometheus text, OTLP ----------------------------------------------------------

# Fine enough around the 2 s start target to read a p99 there.
LAG_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 7.5, 10.0, 30.0, 60.0, 300.0)
REQUEST_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The content type of exposition()'s text.
EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTLP_METRICS_PATH = "/v1/metrics"

_lock = threading.Lock()
_provider: Any = None
_registry: Any = None


def setup_metrics(service: str, *, otlp_endpoint: str = "", otlp_interval_s: float = 15.0) -> None:
    """Install this process's meter provider (once; later calls change nothing).

    Always a Prometheus reader (what :func:`exposition` renders); with ``otlp_endpoint`` (the
    collector's base URL, ``http://collector:4318``) also a PeriodicExportingMetricReader pushing
    to ``<endpoint>/v1/metrics`` every ``otlp_interval_s`` seconds.
    """
    global _provider, _registry  # noqa: PLW0603 - one meter provider per process, installed once
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

    with _lock:
        if _provider is not None:
            return
        registry = CollectorRegistry(auto_describe=False)
        # Series carry only their own attributes: the scrape adds job and instance, and the API tier
        # merges its workers' series by name and labels.
        readers: list[MetricReader] = [PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False,
                                                              registry=registry)]
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            url = otlp_endpoint.rstrip("/")
            if not url.endswith(OTLP_METRICS_PATH):
                url += OTLP_METRICS_PATH
            readers.append(PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=url), export_interval_millis=otlp_interval_s * 1000))
        resource = Resource.create({"service.name": f"kairos-{service}", "service.namespace": "kairos",
                                    "service.instance.id": f"{os.uname().nodename}:{os.getpid()}"})
        _provider = MeterProvider(metric_readers=readers, resource=resource)
        _registry = registry
        metrics.set_meter_provider(_provider)


def shutdown_metrics(timeout_s: float = 5.0) -> None:
    """Flush the OTLP exporter (its last interval) and stop the readers; at process exit."""
    if _provider is not None:
        _provider.shutdown(timeout_millis=timeout_s * 1000)


def exposition() -> bytes:
    """This process's metrics as Prometheus text (empty before :func:`setup_metrics`)."""
    if _registry is None:
        return b""
    from prometheus_client import generate_latest

    return generate_latest(_registry)


def queue_kind(queue: str) -> str:
    """The bounded attribute for a queue key (app.domain.queues): http, shared or tenant."""
    if queue.startswith("@"):
        return "http"
    return "shared" if queue.startswith("shared:") else "tenant"


Reading = tuple[float, Mapping[str, str]]


class ObservedGauge:
    """An observable gauge whose readings come from whoever holds the state (:meth:`watch`).

    Callbacks run at collection time, on the thread that collects (a scrape in the event loop, or
    the OTLP exporter's thread), so a source returns a snapshot and never awaits.
    """

    def __init__(self, name: str, description: str, unit: str = "") -> None:
        self._sources: list[Callable[[], Iterable[Reading]]] = []
        meter.create_observable_gauge(name, callbacks=[self._observe], unit=unit, description=description)

    def watch(self, source: Callable[[], Iterable[Reading]]) -> Callable[[], None]:
        """Add a source of readings; returns the function that removes it."""
        self._sources.append(source)
        return lambda: self._sources.remove(source) if source in self._sources else None

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        for source in list(self._sources):
            try:
                readings = list(source())
            except Exception:  # a failing source must not break the whole scrape
                logging.getLogger(__name__).exception("metric source failed")
                continue
            for value, attributes in readings:
                yield Observation(value, dict(attributes))


meter = metrics.get_meter("kairos")

# API
jobs_submitted = meter.create_counter("kairos.jobs.submitted", description="Jobs accepted by the API")
quota_refusals = meter.create_counter(
    "kairos.quota.refusals",
    description="Submitted jobs and manual executions refused by a tenant quota, by quota (max_active_jobs, "
                "max_submit_per_s, max_manual_per_s, max_manual_inflight); no tenant label: the API port is public")
auth_throttled = meter.create_counter(
    "kairos.auth.throttled",
    description="API requests answered 429 without checking their key: their client address failed to "
                "authenticate too often")
http_request_duration = meter.create_histogram(
    "kairos.http.request.duration", unit="s", explicit_bucket_boundaries_advisory=REQUEST_BUCKETS_S,
    description="API requests by route template, method, status and status class (2xx, 4xx, ...)")
# Scheduler
dispatched = meter.create_counter("kairos.dispatch.executions", description="Occurrences dispatched into executions")
dispatch_lag = meter.create_histogram(
    "kairos.dispatch.lag", unit="s", explicit_bucket_boundaries_advisory=LAG_BUCKETS_S,
    description="dispatched_at - due time (a sample of each batch), by tenant and queue kind")
dispatch_fenced = meter.create_counter(
    "kairos.fenced_batches", description="Dispatch batches refused because a shard lease was lost")
shards_owned = meter.create_up_down_counter("kairos.shards_owned", description="Shards this process owns")
# Execution
leased = meter.create_counter("kairos.executions.leased", description="Executions handed to workers")
start_lag = meter.create_histogram(
    "kairos.start.lag", unit="s", explicit_bucket_boundaries_advisory=LAG_BUCKETS_S,
    description="first lease time - scheduled time of each first attempt, by tenant and queue kind")
executions = meter.create_counter(
    "kairos.executions",
    description="Attempt outcomes: succeeded, retried, dead, lease_lost (a stale report), skipped (not run)")
lease_lost = meter.create_counter(
    "kairos.heartbeats.lease_lost", description="Heartbeats refused: the attempt is no longer current")
lease_expiries = meter.create_counter(
    "kairos.lease_expiries", description="Leases that ran out and were reaped (to ready or dead)")
ready_queue_depth = ObservedGauge(
    "kairos.ready_queue.depth",
    "Executions due and waiting for a worker, by pool; installation-wide (every executor reports the same "
    "count: aggregate with max, not sum)")
breaker_state = ObservedGauge(
    "kairos.breaker.state", "Circuit breaker per HTTP origin with failures: 0 closed, 1 half-open, 2 open")
# Store
tx_retries = meter.create_counter("kairos.db.tx_retries", description="Transactions re-run after 40001/40P01")
tx_ambiguous = meter.create_counter(
    "kairos.db.tx_ambiguous", description="Commits whose outcome the database could not tell (CockroachDB 40003)")
# Data lifecycle (app.executor.retention)
history_archived = meter.create_counter(
    "kairos.history.archived", description="Rows archived to the object store and deleted, by table")
supervisor_restarts = meter.create_counter(
    "kairos.supervisor.restarts", description="Tiers and the embedded PostgreSQL restarted by kairos up")
