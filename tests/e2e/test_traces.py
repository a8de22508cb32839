"""One trace per occurrence, from the submit through the dispatch to the delivery, exported over OTLP
by the real tiers of `kairos up`, and the same trace handed to the HTTP target as `traceparent`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.conftest import wait_for
from tests.e2e.conftest import kairos_up

pytestmark = pytest.mark.slow


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, str, str]]]]:
    """A local OTLP/HTTP endpoint: (service, span name, trace id, parent span id) of every span exported."""
    spans: list[tuple[str, str, str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = next((a.value.string_value for a in resource.resource.attributes
                                    if a.key == "service.name"), "")
                    for scope in resource.scope_spans:
                        spans.extend((service, s.name, s.trace_id.hex(), s.parent_span_id.hex()) for s in scope.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", spans
    server.shutdown()
    server.server_close()


@pytest.fixture
def target() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append(self.headers.get("traceparent", ""))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", seen
    server.shutdown()
    server.server_close()


def test_a_one_off_is_one_trace_from_submit_to_delivery(tmp_path: Path, collector, target) -> None:
    endpoint, spans = collector
    hook, seen = target
    with kairos_up(tmp_path, KAIROS_HTTP_EGRESS_ALLOW="127.0.0.1", KAIROS_OTLP_ENDPOINT=endpoint,
                   KAIROS_OTLP_INTERVAL_S="1") as up, httpx.Client(base_url=up.api, headers=up.headers) as api:
        client_trace = "0af7651916cd43dd8448eb211c80319c"
        resp = api.post("/v1/jobs", json={"name": "traced", "target": {"type": "http", "ref": hook},
                                          "schedule": {"delaySeconds": 1}},
                        headers={"traceparent": f"00-{client_trace}-b7ad6b7169203331-01"})
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["jobId"]
        wait_for(lambda: seen, timeout_s=30, interval_s=0.2, what="the delivery")
        names = {"kairos.submit", "kairos.dispatch", "kairos.deliver"}
        wait_for(lambda: names <= {s[1] for s in spans}, timeout_s=30, interval_s=0.3,
                 what=f"spans {names} exported (got {sorted({s[1] for s in spans})})")
        [execution] = api.get(f"/v1/jobs/{job_id}/executions").json()
    traced = {s[1]: s for s in spans if s[1] in names}
    # One trace: the client's, continued by the submit, the dispatch and the delivery, in three tiers.
    assert {s[2] for s in traced.values()} == {client_trace}
    assert {s[0] for s in traced.values()} == {"kairos-api", "kairos-scheduler", "kairos-executor"}
    assert traced["kairos.submit"][3] == "b7ad6b7169203331"
    # The target got the same trace, and the execution names it.
    [header] = seen
    assert header.split("-")[1] == client_trace and execution["traceId"] == client_trace
