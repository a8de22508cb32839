"""A tier that has started moves its startup objects out of the collector's sight and collects its
young generation less often (app.cli.runtime.settle_gc)."""

from __future__ import annotations

import subprocess
import sys

from app.cli.runtime import GC_YOUNG_THRESHOLD


def test_settle_gc_freezes_what_started_and_raises_the_young_threshold() -> None:
    probe = (
        "import gc; from app.cli.runtime import settle_gc; before = gc.get_threshold(); settle_gc(); "
        "print(before[0], gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:], gc.get_freeze_count())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    before, after, older_kept, frozen = int(out[0]), int(out[1]), out[2], int(out[3])
    assert before == 700 and after == GC_YOUNG_THRESHOLD and older_kept == "True"
    assert frozen > 10_000  # the modules, the configuration, everything alive after start
