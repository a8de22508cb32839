"""The traceparent helpers that carry an occurrence's trace between tiers when no span is recorded."""

from __future__ import annotations

import re

from app.observability import tracing

W3C = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def test_a_fresh_trace_is_w3c_and_unsampled() -> None:
    first, second = tracing.fresh(), tracing.fresh()
    assert W3C.match(first) and first.endswith("-00") and first != second


def test_a_child_keeps_the_trace_and_flags_with_a_new_span() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    child = tracing.child_of(parent)
    assert W3C.match(child) and child.split("-")[1] == "0af7651916cd43dd8448eb211c80319c"
    assert child.split("-")[2] != "b7ad6b7169203331" and child.endswith("-01")


def test_malformed_or_missing_contexts_start_a_new_trace() -> None:
    for bad in (
        None,
        "",
        "garbage",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-xyz-b7ad6b7169203331-01",
    ):
        assert tracing.parse(bad) is None
        assert W3C.match(tracing.child_of(bad))


def test_without_an_exporter_no_span_is_made_and_an_occurrence_still_gets_a_trace() -> None:
    assert not tracing.enabled()
    with tracing.span("kairos.test") as traceparent:
        assert traceparent is None
    assert W3C.match(tracing.occurrence(None, one_off=True, attributes={}))
