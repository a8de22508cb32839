"""One trace per occurrence, from the submit through the dispatch to the delivery, exported over OTLP
by the real tiers of `kairos up`, and the same trace handed to the HTTP target as `traceparent`."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.e2e.conftest import Request, endpoint, kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def spans_of(received: list[Request]) -> list[tuple[str, str, str, str]]:
    """(service, span name, trace id, parent span id) of every span a local OTLP/HTTP endpoint received."""
    spans = []
    for request in received:
        if request.path != "/v1/traces":
            continue
        for resource in trace_service_pb2.ExportTraceServiceRequest.FromString(request.body).resource_spans:
            service = next((a.value.string_value for a in resource.resource.attributes if a.key == "service.name"), "")
            for scope in resource.scope_spans:
                spans.extend((service, s.name, s.trace_id.hex(), s.parent_span_id.hex()) for s in scope.spans)
    return spans


@pytest.fixture
def target() -> Iterator[tuple[str, list[Request]]]:
    with endpoint() as served:
        yield served


def test_a_one_off_is_one_trace_from_submit_to_delivery(tmp_path: Path, target) -> None:
    base, seen = target
    hook = f"{base}/hook"
    with (
        endpoint() as (collector, exported),
        kairos_up(
            tmp_path, KAIROS_HTTP_EGRESS_ALLOW="127.0.0.1", KAIROS_OTLP_ENDPOINT=collector, KAIROS_OTLP_INTERVAL_S="1"
        ) as up,
        httpx.Client(base_url=up.api, headers=up.headers) as api,
    ):
        client_trace = "0af7651916cd43dd8448eb211c80319c"
        resp = api.post(
            "/v1/jobs",
            json={"name": "traced", "target": {"type": "http", "ref": hook}, "schedule": {"delaySeconds": 1}},
            headers={"traceparent": f"00-{client_trace}-b7ad6b7169203331-01"},
        )
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["jobId"]
        wait_for(lambda: seen, timeout_s=30, interval_s=0.2, what="the delivery")
        names = {"kairos.submit", "kairos.dispatch", "kairos.deliver"}
        wait_for(
            lambda: names <= {s[1] for s in spans_of(exported)},
            timeout_s=30,
            interval_s=0.3,
            what=f"spans {names} exported",
        )
        [execution] = api.get(f"/v1/jobs/{job_id}/executions").json()
    traced = {s[1]: s for s in spans_of(exported) if s[1] in names}
    # One trace: the client's, continued by the submit, the dispatch and the delivery, in three tiers.
    assert {s[2] for s in traced.values()} == {client_trace}
    assert {s[0] for s in traced.values()} == {"kairos-api", "kairos-scheduler", "kairos-executor"}
    assert traced["kairos.submit"][3] == "b7ad6b7169203331"
    # The target got the same trace, and the execution names it.
    [delivery] = seen
    assert delivery.headers["traceparent"].split("-")[1] == client_trace and execution["traceId"] == client_trace


def test_a_worker_pool_attempt_joins_its_occurrences_trace(tmp_path: Path) -> None:
    """A recurring job's occurrence starts its own trace (linked to the submit); the executor's span for
    the attempt a `kairos worker` leased and completed belongs to it."""
    with (
        endpoint() as (collector, exported),
        kairos_up(tmp_path, KAIROS_OTLP_ENDPOINT=collector, KAIROS_OTLP_INTERVAL_S="1") as up,
        httpx.Client(base_url=up.api, headers=up.headers) as api,
    ):
        worker = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--pool", "traced", "--", "cat"],
            env={**up.env, "KAIROS_API_KEY": up.key, "KAIROS_GRPC_ADDR": up.grpc_addr},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            job_id = api.post(
                "/v1/jobs",
                json={"name": "pool", "target": {"type": "queue", "ref": "traced"}, "schedule": {"every": "10s"}},
            ).json()["jobId"]
            api.post(f"/v1/jobs/{job_id}:run")  # a manual run: no wait for the first interval
            done = wait_for(
                lambda: [e for e in api.get(f"/v1/jobs/{job_id}/executions").json() if e["state"] == "succeeded"],
                timeout_s=40,
                interval_s=0.3,
                what="a run",
            )
            trace_id = done[0]["traceId"]
            assert trace_id
            wait_for(
                lambda: ("kairos-executor", "kairos.attempt", trace_id) in {s[:3] for s in spans_of(exported)},
                timeout_s=30,
                interval_s=0.3,
                what="the attempt's span in the occurrence's trace",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=20)
