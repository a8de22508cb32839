"""Traces: one per occurrence, from the submit through the dispatch to each delivery attempt.

The W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``) is the thread through the tiers,
which never call each other: the API stores the submit's on the job, the scheduler stores each
occurrence's on its execution, and the executor continues it for every attempt and sends it to
HTTP targets as the ``traceparent`` header. A one-off's occurrence continues the submit's trace;
a recurring job's occurrences each start their own trace, linked to the submit.

Spans are recorded and exported only when ``KAIROS_OTLP_ENDPOINT`` is set (:func:`setup_tracing`,
OTLP/HTTP to ``<endpoint>/v1/traces``). Without it no span is made at all (the dispatch path stays
as cheap as it was) and each occurrence still gets a fresh trace id, unsampled (flags ``00``), so
a target can correlate the attempts of one occurrence and put its own spans under it.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

log = logging.getLogger(__name__)

OTLP_TRACES_PATH = "/v1/traces"
_provider: Any = None


def setup_tracing(service: str, otlp_endpoint: str) -> bool:
    """Install a tracer provider exporting to ``otlp_endpoint`` (once); False (no tracing) without one."""
    global _provider  # noqa: PLW0603 - one tracer provider per process, installed once
    if _provider is not None or not otlp_endpoint:
        return _provider is not None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url = otlp_endpoint.rstrip("/")
    if not url.endswith(OTLP_TRACES_PATH):
        url += OTLP_TRACES_PATH
    resource = Resource.create(
        {
            "service.name": f"kairos-{service}",
            "service.namespace": "kairos",
            "service.instance.id": f"{os.uname().nodename}:{os.getpid()}",
        }
    )
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    trace.set_tracer_provider(_provider)
    return True


def shutdown_tracing() -> None:
    """Flush the spans still batched (at process exit)."""
    if _provider is not None:
        _provider.shutdown()


def enabled() -> bool:
    return _provider is not None


def parse(traceparent: str | None) -> SpanContext | None:
    """The span context a ``traceparent`` names; None for a missing or malformed one."""
    if not traceparent:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))


def format_context(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


# Trace and span ids need to be unique, not secret: a seeded PRNG makes them without a syscall each
# (secrets.token_hex was 8% of the scheduler's CPU in a herd, one id per dispatched occurrence).
_ids = random.Random(secrets.randbits(128))


def _span_id() -> str:
    return f"{_ids.getrandbits(64) or 1:016x}"


def fresh() -> str:
    """A new, unsampled trace (what an occurrence gets when nothing records spans)."""
    return f"00-{_ids.getrandbits(128) or 1:032x}-{_span_id()}-00"


def child_of(traceparent: str | None) -> str:
    """The same trace, a new span id: what a hop passes on when it records no span of its own."""
    ctx = parse(traceparent)
    if ctx is None:
        return fresh()
    return f"00-{ctx.trace_id:032x}-{_span_id()}-{int(ctx.trace_flags):02x}"


@contextmanager
def span(
    name: str, *, parent: str | None = None, link: str | None = None, attributes: Mapping[str, Any] | None = None
) -> Iterator[str | None]:
    """A span under ``parent`` (or a new trace, linked to ``link``) while the block runs; yields its
    ``traceparent``, or None when tracing is off (callers decide what to store then)."""
    if _provider is None:
        yield None
        return
    parent_ctx = parse(parent)
    context = trace.set_span_in_context(NonRecordingSpan(parent_ctx)) if parent_ctx else None
    linked = parse(link)
    tracer = trace.get_tracer("kairos")
    with tracer.start_as_current_span(
        name,
        context=context,
        links=[Link(linked)] if linked else None,
        attributes=dict(attributes or {}),
        record_exception=True,
    ) as current:
        yield format_context(current.get_span_context())


def occurrence(job_traceparent: str | None, *, one_off: bool, attributes: Mapping[str, Any]) -> str:
    """The traceparent of a new occurrence at its dispatch: a one-off continues its submit's trace, a
    recurring job's occurrence starts a trace linked to the submit."""
    if _provider is None:
        return fresh()
    with span(
        "kairos.dispatch",
        parent=job_traceparent if one_off else None,
        link=None if one_off else job_traceparent,
        attributes=attributes,
    ) as tp:
        assert tp is not None
        return tp


def start_attempt(traceparent: str | None, started_at: datetime, attributes: Mapping[str, Any]) -> Any:
    """A ``kairos.attempt`` span under the occurrence's trace, from its lease until :func:`end_attempt`
    (worker pools and the HTTP pool alike); None when tracing is off."""
    if _provider is None:
        return None
    parent = parse(traceparent)
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent else None
    return trace.get_tracer("kairos").start_span(
        "kairos.attempt", context=context, attributes=dict(attributes), start_time=int(started_at.timestamp() * 1e9)
    )


def end_attempt(span: Any, outcome: str) -> None:
    if span is not None:
        span.set_attribute("kairos.outcome", outcome)
        span.end()
