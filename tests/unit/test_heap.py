"""DueHeap: ordering, fairness, quotas, dedupe and shard loss. Pure, no I/O."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from app.scheduler.heap import DueEntry, DueHeap, TokenBucket

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
TS0 = T0.timestamp()
A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def entry(tenant=A, at: float = 0.0, shard: int = 0, revision: int = 1, weight: int = 1, quota: int = 5000,
          job=None) -> DueEntry:
    run = T0 + timedelta(seconds=at)
    return DueEntry(shard, revision, run.replace(second=0), run, job or uuid.uuid4(), tenant, run, weight, quota)


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_pops_only_due_entries_in_time_order() -> None:
    heap = DueHeap()
    late, early, mid = entry(at=3), entry(at=1), entry(at=2)
    heap.add([late, early, mid])
    assert heap.pop_due(TS0 + 0.5, 10) == []
    assert heap.pop_due(TS0 + 2, 10) == [early, mid]
    assert heap.next_wake_ts() == TS0 + 3
    assert heap.pop_due(TS0 + 5, 10) == [late]
    assert len(heap) == 3  # popped entries stay known until settled
    heap.settle([early, mid, late])
    assert len(heap) == 0 and heap.next_wake_ts() is None


def test_adds_each_key_once_and_ignores_recently_settled_rows() -> None:
    clock = FakeMonotonic()
    heap = DueHeap(recent_s=60, monotonic=clock)
    e = entry()
    assert heap.add([e, e]) == 1
    assert heap.add([entry(job=e.job_id)]) == 0  # same (job_id, next_run_at)
    [popped] = heap.pop_due(TS0, 10)
    heap.settle([popped])
    assert heap.add([e]) == 0  # a stale scan read the row before its dispatch committed
    clock.t = 61
    assert heap.add([e]) == 1


def test_same_instant_entries_interleave_round_robin_across_tenants() -> None:
    heap = DueHeap()
    heap.add([entry(A) for _ in range(6)] + [entry(B) for _ in range(2)] + [entry(C) for _ in range(2)])
    order = [e.tenant_id for e in heap.pop_due(TS0, 100)]
    assert order[:6].count(A) == 2 and order[:6].count(B) == 2 and order[:6].count(C) == 2
    assert order[6:] == [A] * 4


def test_weight_gives_a_tenant_proportionally_more_turns() -> None:
    heap = DueHeap()
    heap.add([entry(A, weight=3) for _ in range(30)] + [entry(B, weight=1) for _ in range(30)])
    first = [e.tenant_id for e in heap.pop_due(TS0, 20)]
    assert first.count(A) == 15 and first.count(B) == 5


def test_earlier_entries_still_come_first_whatever_the_tenant() -> None:
    heap = DueHeap()
    heap.add([entry(A, at=0) for _ in range(5)] + [entry(B, at=1)])
    assert [e.tenant_id for e in heap.pop_due(TS0 + 1, 10)] == [A] * 5 + [B]


def test_quota_defers_the_excess_in_order_while_other_tenants_pass() -> None:
    heap = DueHeap()
    greedy = [entry(A, at=i * 0.001, quota=5) for i in range(12)]
    heap.add(greedy + [entry(B, at=0.5) for _ in range(3)])
    first = heap.pop_due(TS0 + 1, 100)
    assert [e for e in first if e.tenant_id == A] == greedy[:5]
    assert sum(e.tenant_id == B for e in first) == 3
    assert heap.deferred_count == 7
    wake = heap.next_wake_ts()
    assert wake is not None and TS0 + 1 < wake <= TS0 + 1.2 + 1e-9
    assert heap.pop_due(TS0 + 1.1, 100) == []
    assert heap.pop_due(TS0 + 1.4, 100) == greedy[5:7]
    assert heap.pop_due(TS0 + 3, 100) == greedy[7:12]


def test_token_bucket_refills_up_to_one_second() -> None:
    bucket = TokenBucket(10, TS0)
    assert sum(bucket.take(TS0) for _ in range(20)) == 10
    assert sum(bucket.take(TS0 + 100) for _ in range(20)) == 10


def test_dropping_a_shard_forgets_its_entries_everywhere() -> None:
    heap = DueHeap()
    mine, lost = entry(shard=1), entry(shard=2)
    deferred_lost = [entry(B, shard=2, quota=1) for _ in range(3)]
    heap.add([mine, lost] + deferred_lost)
    heap.pop_due(TS0, 100)
    heap.requeue([mine, lost])
    assert heap.drop_shards([2]) == 4
    assert len(heap) == 1
    assert heap.pop_due(TS0 + 10, 100) == [mine]
    # Re-acquired under a new revision, the shard's rows load again.
    assert heap.add([entry(shard=2, revision=2, job=lost.job_id)]) == 1


def test_forget_lets_a_fenced_row_be_loaded_again() -> None:
    heap = DueHeap()
    e = entry()
    heap.add([e])
    heap.forget(heap.pop_due(TS0, 10))
    assert heap.add([e]) == 1
