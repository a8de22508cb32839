"""Structured logging and the OpenTelemetry metric instruments, defined once.

Logs are one JSON object per line (``KAIROS_LOG_FORMAT=json``, the default) carrying the
``extra={...}`` fields of each call. Metrics go through the OpenTelemetry SDK; ``metric_reader``
is the in-memory reader that an exporter or a metrics endpoint collects from.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """Human-readable lines (`kairos up`'s own output) that still carry the structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        return f"{line} {fields}" if fields else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str = "INFO", fmt: str = "json", process: str = "kairos") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "httpx", "httpcore", "grpc", "pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


metric_reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[metric_reader]))
meter = metrics.get_meter("kairos")

# API
jobs_submitted = meter.create_counter("kairos.jobs.submitted", description="Jobs accepted by the API")
# Scheduler
dispatched = meter.create_counter("kairos.dispatch.executions", description="Occurrences dispatched into executions")
dispatch_lag = meter.create_histogram("kairos.dispatch.lag", unit="s",
                                      description="dispatched_at - scheduled run time")
dispatch_fenced = meter.create_counter("kairos.dispatch.fenced",
                                       description="Dispatch batches refused because a shard lease was lost")
shards_owned = meter.create_up_down_counter("kairos.scheduler.shards_owned", description="Shards this process owns")
# Execution
leased = meter.create_counter("kairos.executions.leased", description="Executions handed to workers")
finished = meter.create_counter("kairos.executions.finished", description="Executions finished, by outcome")
lease_lost = meter.create_counter("kairos.executions.lease_lost", description="Worker calls refused: stale attempt")
reaped = meter.create_counter("kairos.executions.reaped", description="Expired leases returned or dead-lettered")
# Store
tx_retries = meter.create_counter("kairos.db.tx_retries", description="Transactions re-run after 40001/40P01")

