"""The API's /metrics names its media type once: Prometheus's text format, with one charset parameter."""

from __future__ import annotations

import httpx

from app.observability import EXPOSITION_CONTENT_TYPE
from tests.api.conftest import ApiProcess


def test_metrics_content_type_has_one_charset(api: ApiProcess) -> None:
    answer = httpx.get(f"{api.url}/metrics", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == EXPOSITION_CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
