"""Scheduler heap memory per entry, and its add/pop cost. Component probe (no tiers, no database): not the user's path.

    .venv/bin/python loadtest/heap_memory.py [--entries 1000000] [--tenants 100] [--timing-entries 200000]
    .venv/bin/python loadtest/heap_memory.py --entries 2000000 --timing-entries 0   # the lived bench's figure

Builds the entries the way the DueLoader does (a DueEntry per due_index row, with its own UUIDs
and datetimes, as the driver returns them), adds them to a DueHeap under tracemalloc, and prints
the bytes allocated per entry: everything the heap keeps for them (its columns, key index, order
buckets and tables), plus the last page of rows the probe still holds. Target: <= 64 B
per entry with 2,000,000 upcoming entries loaded (the brief's figure; herd.py's memory scenario
checks 150 B at 1,000,000).

Then, without tracemalloc, it builds ``--timing-entries`` entries the same way (0: none; by
default fewer than for the memory figure, so that the bench's memory scenario stays short) and
times adding them (in the loader's pages) and popping them all (batches of 2,000, as the
dispatcher does, each settled; each batch one second later, so the tenants' quotas refill as they
would in real time).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
import uuid
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.scheduler.heap import DueEntry, DueHeap

BASE = datetime(2026, 12, 2, tzinfo=timezone.utc)
PAGE = 5_000  # the loader adds a page of rows at a time
POP_BATCH = 2_000  # the dispatcher's batch
TARGET_B = 64  # bytes per entry


def pages(entries: int, tenants: int, seed: int, zone: str = "") -> Iterator[list[DueEntry]]:
    """The rows, a page at a time: due over one day, tenants and shards at random (in ``zone``: the
    zone the driver gives them, that of the session; by default datetime's own UTC)."""
    rng = random.Random(seed)
    base = BASE.astimezone(ZoneInfo(zone)) if zone else BASE
    tenant_ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(tenants)]
    for start in range(0, entries, PAGE):
        batch = []
        for _ in range(min(PAGE, entries - start)):
            at_s = rng.randrange(0, 86_400)
            at = base + timedelta(seconds=at_s)  # a fresh datetime per column, as the driver returns them
            batch.append(
                DueEntry(
                    rng.randrange(256),
                    1,
                    base + timedelta(seconds=at_s - at_s % 60),
                    at,
                    uuid.UUID(int=rng.getrandbits(128)),
                    uuid.UUID(tenant_ids[rng.randrange(len(tenant_ids))]),
                    base + timedelta(seconds=at_s),
                )
            )
        yield batch


def footprint(heap: DueHeap) -> int:
    """Bytes the heap holds, by walking what it refers to (``sys.getsizeof`` of each object once):
    its columns, key index, buckets, tables and their items; classes and functions are not counted."""
    seen: set[int] = set()
    todo: list[object] = [heap]
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or callable(obj):  # classes and functions (the clock) are shared, not the heap's
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            todo.extend(obj)
        if hasattr(obj, "__dict__"):
            todo.append(vars(obj))
        todo.extend(getattr(obj, name) for name in getattr(type(obj), "__slots__", ()) if hasattr(obj, name))
    return total


def measure_memory(args: argparse.Namespace) -> None:
    generate = pages(args.entries, args.tenants, args.seed, args.zone)
    heap = DueHeap()
    if args.walk:
        for batch in generate:
            heap.add(batch)
        per_entry = footprint(heap) / max(1, len(heap))
        print(f"entries loaded        {len(heap):,}")
        print(f"bytes per heap entry  {per_entry:,.0f} B (target <= {TARGET_B} B, by walking the heap)")
        return
    tracemalloc.start()
    for batch in generate:
        heap.add(batch)
    current, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_entry = current / max(1, len(heap))
    verdict = "pass" if per_entry <= TARGET_B else "FAIL"
    print(f"entries loaded        {len(heap):,}")
    print(f"bytes per heap entry  {per_entry:,.0f} B (target <= {TARGET_B} B)  {verdict}")


def measure_time(args: argparse.Namespace) -> None:
    entries = args.timing_entries
    batches = list(pages(entries, args.tenants, args.seed, args.zone))
    heap = DueHeap()
    add_s = slowest_add_s = 0.0
    for batch in batches:
        started = time.perf_counter()
        heap.add(batch)
        took = time.perf_counter() - started
        add_s += took
        slowest_add_s = max(slowest_add_s, took)
    del batches
    end_ts = (BASE + timedelta(days=1)).timestamp()
    pop_s = settle_s = 0.0
    popped = calls = 0
    while len(heap) and calls <= entries:  # bounded, should the heap ever stop giving
        # Every batch a second later, as if dispatched in real time: quotas refill between batches.
        started = time.perf_counter()
        batch = heap.pop_due(end_ts + calls, POP_BATCH)
        settling = time.perf_counter()
        pop_s += settling - started
        calls += 1
        heap.settle(batch)
        settle_s += time.perf_counter() - settling
        popped += len(batch)
    n = max(1, entries)
    print(
        f"add                   {add_s / n * 1e6:.2f} us per entry ({add_s:.1f} s for {entries:,}, "
        f"pages of {PAGE:,}; slowest page {slowest_add_s * 1e3:.0f} ms)"
    )
    print(
        f"pop_due               {pop_s / max(1, popped) * 1e6:.2f} us per entry (batches of {POP_BATCH:,}, "
        f"{popped:,} popped in {calls:,} calls)"
    )
    print(f"settle                {settle_s / max(1, popped) * 1e6:.2f} us per entry")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--timing-entries", type=int, default=200_000, help="entries to time add and pop with (0: none)")
    p.add_argument("--zone", default="", help="the entries' time zone, as the driver's session has it (Etc/UTC)")
    p.add_argument(
        "--walk",
        action="store_true",
        help="count the heap's bytes by walking its objects instead of under tracemalloc (minutes faster at "
        "2,000,000; leaves out the allocator's own overhead)",
    )
    args = p.parse_args()
    measure_memory(args)
    if args.timing_entries > 0:
        measure_time(args)


if __name__ == "__main__":
    main()
