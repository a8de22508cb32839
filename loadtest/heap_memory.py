"""Scheduler heap memory per entry. Component probe (no tiers, no database): not the user's path.

    .venv/bin/python loadtest/heap_memory.py [--entries 1000000] [--tenants 100]

Builds the entries the way the DueLoader does (a DueEntry per due_index row, with its own UUIDs
and datetimes, as the driver returns them), adds them to a DueHeap under tracemalloc, and prints
the bytes allocated per entry: the heap item, the entry, its key in the index and the shard set,
the rank table, and the row's own objects. Target (issue 7): <= 150 B per entry with 1,000,000
upcoming entries loaded.
"""

from __future__ import annotations

import argparse
import random
import sys
import tracemalloc
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.scheduler.heap import DueEntry, DueHeap  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    rng = random.Random(args.seed)
    base = datetime(2026, 12, 2, tzinfo=timezone.utc)
    tenants = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(args.tenants)]
    tracemalloc.start()
    heap = DueHeap()
    chunk = 5_000  # the loader adds a page of rows at a time
    for start in range(0, args.entries, chunk):
        batch = []
        for _ in range(min(chunk, args.entries - start)):
            at_s = rng.randrange(0, 86_400)
            at = base + timedelta(seconds=at_s)  # a fresh datetime per column, as the driver returns them
            batch.append(DueEntry(rng.randrange(256), 1, base + timedelta(seconds=at_s - at_s % 60), at,
                                  uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(tenants[rng.randrange(len(tenants))]),
                                  base + timedelta(seconds=at_s)))
        heap.add(batch)
    current, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_entry = current / max(1, len(heap))
    verdict = "pass" if per_entry <= 150 else "FAIL"
    print(f"entries loaded        {len(heap):,}")
    print(f"bytes per heap entry  {per_entry:,.0f} B (target <= 150 B)  {verdict}")


if __name__ == "__main__":
    main()
