"""The OpenTelemetry meter provider, its Prometheus text and OTLP export, and every instrument."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

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
        readers: list[MetricReader] = [
            PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False, registry=registry)
        ]
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            url = otlp_endpoint.rstrip("/")
            if not url.endswith(OTLP_METRICS_PATH):
                url += OTLP_METRICS_PATH
            readers.append(
                PeriodicExportingMetricReader(
                    OTLPMetricExporter(endpoint=url), export_interval_millis=otlp_interval_s * 1000
                )
            )
        resource = Resource.create(
            {
                "service.name": f"kairos-{service}",
                "service.namespace": "kairos",
                "service.instance.id": f"{os.uname().nodename}:{os.getpid()}",
            }
        )
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
    "max_submit_per_s, max_manual_per_s, max_manual_inflight); no tenant label: the API port is public",
)
auth_throttled = meter.create_counter(
    "kairos.auth.throttled",
    description="API requests answered 429 without checking their key: their client address failed to "
    "authenticate too often",
)
http_request_duration = meter.create_histogram(
    "kairos.http.request.duration",
    unit="s",
    explicit_bucket_boundaries_advisory=REQUEST_BUCKETS_S,
    description="API requests by route template, method, status and status class (2xx, 4xx, ...)",
)
# Scheduler
dispatched = meter.create_counter("kairos.dispatch.executions", description="Occurrences dispatched into executions")
dispatch_lag = meter.create_histogram(
    "kairos.dispatch.lag",
    unit="s",
    explicit_bucket_boundaries_advisory=LAG_BUCKETS_S,
    description="dispatched_at - due time (a sample of each batch), by tenant and queue kind",
)
dispatch_fenced = meter.create_counter(
    "kairos.fenced_batches", description="Dispatch batches refused because a shard lease was lost"
)
shards_owned = meter.create_up_down_counter("kairos.shards_owned", description="Shards this process owns")
# Execution
leased = meter.create_counter("kairos.executions.leased", description="Executions handed to workers")
start_lag = meter.create_histogram(
    "kairos.start.lag",
    unit="s",
    explicit_bucket_boundaries_advisory=LAG_BUCKETS_S,
    description="first lease time - scheduled time of each first attempt, by tenant and queue kind",
)
executions = meter.create_counter(
    "kairos.executions",
    description="Attempt outcomes: succeeded, retried, dead, lease_lost (a stale report), skipped (not run)",
)
lease_lost = meter.create_counter(
    "kairos.heartbeats.lease_lost", description="Heartbeats refused: the attempt is no longer current"
)
lease_expiries = meter.create_counter(
    "kairos.lease_expiries", description="Leases that ran out and were reaped (to ready or dead)"
)
ready_queue_depth = ObservedGauge(
    "kairos.ready_queue.depth",
    "Executions due and waiting for a worker, by pool; installation-wide (every executor reports the same "
    "count: aggregate with max, not sum)",
)
breaker_state = ObservedGauge(
    "kairos.breaker.state", "Circuit breaker per HTTP origin with failures: 0 closed, 1 half-open, 2 open"
)
# Store
tx_retries = meter.create_counter("kairos.db.tx_retries", description="Transactions re-run after 40001/40P01")
tx_ambiguous = meter.create_counter(
    "kairos.db.tx_ambiguous", description="Commits whose outcome the database could not tell (CockroachDB 40003)"
)
# Data lifecycle (app.executor.retention)
history_archived = meter.create_counter(
    "kairos.history.archived", description="Rows archived to the object store and deleted, by table"
)
supervisor_restarts = meter.create_counter(
    "kairos.supervisor.restarts", description="Tiers and the embedded PostgreSQL restarted by kairos up"
)
