"""Database failover under load: a PostgreSQL primary with a streaming standby, real Kairos processes
(api, scheduler, executor, SDK worker) on one multi-host URL with target_session_attrs=read-write,
jobs flowing through the REST API; the primary is SIGKILLed and the standby promoted, and the
processes follow by themselves (app/drill/scenarios.py, `kairos drill db-failover`).

Synchronous replication: no acknowledged job may be lost. Asynchronous: the loss is measured and
reported (it may be zero; a commit acknowledged before the standby had it is the loss asked about).
"""

from __future__ import annotations

import pytest

from app.drill.scenarios import DrillOptions, database_failover

pytestmark = pytest.mark.slow

SMALL = {"herd": 100, "steady_per_s": 5.0, "recurring": 2, "warmup_s": 2.0, "observe_s": 2.0, "timeout_s": 80.0}


@pytest.mark.timeout(100)
async def test_with_synchronous_replication_no_acknowledged_job_is_lost() -> None:
    report = await database_failover(DrillOptions(synchronous=True, **SMALL))
    lines = dict(report.lines)
    assert report.ok, report.render()
    assert lines["lost"] == "0", report.render()
    assert lines["missing after failover"].startswith("0 of "), report.render()
    assert "(sync)" in lines["fault"], report.render()  # the standby was synchronous at the failure
    assert float(lines["recovery time"].split(" s ")[0]) < 30


@pytest.mark.timeout(100)
async def test_with_asynchronous_replication_the_loss_is_measured(capsys: pytest.CaptureFixture[str]) -> None:
    report = await database_failover(DrillOptions(synchronous=False, **SMALL))
    lines = dict(report.lines)
    assert "error" not in lines, report.render()
    assert "(async)" in lines["fault"], report.render()
    lost = int(lines["lost"].split()[0])
    with capsys.disabled():
        print(f"\nasynchronous database failover: lost {lost}; {lines['missing after failover']}; "
              f"{lines['fault'].split('; ', 1)[1]}")
    assert lines["ran"].endswith("owed occurrences")
