"""`kairos up`'s own /metrics has its restart counter from the start, at 0 per tier, not only after a restart."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.e2e.conftest import kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def test_the_supervisors_metrics_have_the_restart_counter_before_any_restart(tmp_path: Path) -> None:
    base = free_port()
    with kairos_up(tmp_path, KAIROS_METRICS_PORT=str(base)) as up:
        assert up.proc.poll() is None
        url = f"http://127.0.0.1:{base + 2}/metrics"
        text = wait_for(lambda: httpx.get(url, timeout=5).text, timeout_s=20, what="the supervisor's /metrics")
    samples = dict(re.findall(r"^kairos_supervisor_restarts_total\{([^}]*)\} (\S+)$", text, flags=re.MULTILINE))
    tiers = {re.search(r'tier="([^"]+)"', labels).group(1) for labels in samples}
    assert {"api", "scheduler", "executor"} <= tiers, text
    assert set(samples.values()) == {"0.0"}, samples
