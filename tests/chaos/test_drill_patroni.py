"""``kairos drill region-failover --failover patroni`` as a real command: Patroni and a three-member etcd
decide the failover, Kairos follows the promotion through its multi-host URL, nothing acknowledged is lost.

It takes about a minute (the leader key's TTL is part of it), so it runs only when asked:
``KAIROS_PATRONI_DRILL=1`` (``make drills`` sets it), and it skips when the patroni and etcd commands
(Debian: patroni, etcd-server) or the PostgreSQL 15 server binaries are not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app.drill.cluster import PG_BIN_DEFAULT
from app.drill.patroni import missing_binaries
from tests.chaos.conftest import left_running
from tests.chaos.test_drills import SMALL, kairos

SECONDS = re.compile(r"^(\d+(?:\.\d+)?) s")


def seconds(value: str) -> float:
    found = SECONDS.match(value)
    assert found, value
    return float(found.group(1))


def test_without_patroni_or_etcd_the_mode_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*kairos(), "drill", "region-failover", "--failover", "patroni"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(tmp_path)},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--failover patroni needs patroni and etcd on PATH" in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.skipif(
    not os.environ.get("KAIROS_PATRONI_DRILL"),
    reason="about a minute: runs with KAIROS_PATRONI_DRILL=1 (make drills sets it)",
)
@pytest.mark.skipif(
    bool(missing_binaries()),
    reason=f"not installed: {', '.join(missing_binaries())} (Debian: apt-get install patroni etcd-server etcd-client)",
)
@pytest.mark.skipif(not (PG_BIN_DEFAULT / "postgres").exists(), reason="no PostgreSQL 15 binaries")
def test_patroni_decides_the_failover_and_nothing_acknowledged_is_lost() -> None:
    ttl = 5
    done = subprocess.run(
        [
            *kairos(),
            "drill",
            "region-failover",
            "--failover",
            "patroni",
            "--patroni-ttl",
            str(ttl),
            *SMALL[:-2],
            "--timeout",
            "150",
            "--keep",
        ],
        capture_output=True,
        text=True,
        timeout=190,
    )
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    directory = lines.get("logs")
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert lines["drill"] == "region-failover (synchronous replication, Patroni failover)"
        # Nobody promoted the standby at the kill: the failure was detected when the leader key's TTL ran out.
        detection = seconds(lines["detection time"])
        assert 0.5 * ttl <= detection <= 3 * ttl, lines["detection time"]
        assert seconds(lines["promotion time"]) < ttl, lines["promotion time"]
        assert seconds(lines["takeover time"]) >= detection, lines["takeover time"]
        assert "us-east owns 256/256 shards" in lines["takeover time"]
        assert lines["reconnected"].startswith("4 of 4 "), lines["reconnected"]
        assert lines["lost"] == "0", done.stdout
        assert "lag back under 2 s" in lines and "duplicated" in lines
        assert lines["missing after failover"].startswith("0 of ")
        assert directory and left_running(directory) == []
    finally:
        if directory:
            shutil.rmtree(directory, ignore_errors=True)
