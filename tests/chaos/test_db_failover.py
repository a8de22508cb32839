"""Database failover under load: a PostgreSQL primary with a streaming standby, real Kairos processes
(api, scheduler, executor, SDK worker) on one multi-host URL with target_session_attrs=read-write,
jobs flowing through the REST API; the primary's WAL senders are stopped for a second (a stalled
link), then the primary is SIGKILLed and the standby promoted, and the processes follow by themselves
(app/drill/scenarios.py, `kairos drill db-failover --link-stall 1`).

Synchronous replication: commits made during the stall are never acknowledged, so no acknowledged
job may be lost. Asynchronous: they are acknowledged and lost; the test reports how many.
"""

from __future__ import annotations

import re
import shutil

import pytest

from app.drill.measure import Report
from app.drill.scenarios import DrillOptions, database_failover
from tests.chaos.conftest import left_running

pytestmark = pytest.mark.slow

SMALL = {
    "herd": 100,
    "steady_per_s": 5.0,
    "recurring": 2,
    "warmup_s": 2.0,
    "observe_s": 2.0,
    "timeout_s": 80.0,
    "link_stall_s": 1.0,
}


async def failover(*, synchronous: bool) -> Report:
    """The drill, kept so its directory can be searched afterwards: none of its processes may be left,
    a WAL sender stopped by the stalled link included."""
    report = await database_failover(DrillOptions(synchronous=synchronous, keep=True, **SMALL))
    directory = dict(report.lines)["logs"]
    try:
        assert left_running(directory) == [], report.render()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return report


def never_received(fault: str) -> tuple[int, int]:
    """(bytes of WAL, committed transactions) the standby never received, from the report's fault line."""
    found = re.search(r"(\d+) bytes of WAL and (\d+) committed transactions the standby never received", fault)
    assert found, fault
    return int(found.group(1)), int(found.group(2))


@pytest.mark.timeout(100)
async def test_with_synchronous_replication_no_acknowledged_job_is_lost() -> None:
    report = await failover(synchronous=True)
    lines = dict(report.lines)
    assert report.ok, report.render()
    assert lines["lost"] == "0", report.render()
    assert lines["missing after failover"].startswith("0 of "), report.render()
    assert "sync standby" in lines["fault"], report.render()
    assert never_received(lines["fault"])[1] > 0, report.render()  # the stall did hold commits back
    assert float(lines["recovery time"].split(" s ")[0]) < 30


@pytest.mark.timeout(100)
async def test_with_asynchronous_replication_the_loss_is_measured(capsys: pytest.CaptureFixture[str]) -> None:
    report = await failover(synchronous=False)
    lines = dict(report.lines)
    assert "error" not in lines, report.render()
    assert "async standby" in lines["fault"], report.render()
    missing = int(lines["missing after failover"].split()[0])
    lost = int(lines["lost"].split()[0])
    _, commits = never_received(lines["fault"])
    with capsys.disabled():
        print(
            f"\nasynchronous database failover after a 1 s stalled link: {lines['missing after failover']}; "
            f"lost {lost} occurrences; {commits} committed transactions never reached the standby"
        )
    # Submits acknowledged during the stall are the loss; each of them is one of the lost commits.
    assert 0 < missing <= commits, report.render()
    assert lost >= missing, report.render()
