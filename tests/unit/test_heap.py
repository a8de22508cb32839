"""DueHeap: ordering, fairness, quotas, dedupe and shard loss. Pure, no I/O."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from app.scheduler.heap import DueEntry, DueHeap, TokenBucket

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
TS0 = T0.timestamp()
A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def entry(
    tenant=A, at: float = 0.0, shard: int = 0, revision: int = 1, weight: int = 1, quota: int = 5000, job=None
) -> DueEntry:
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
    heap.add([mine, lost, *deferred_lost])
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


# --- The compact layout (slots, generations, the key index, buckets) ------------------------------


def test_a_settled_slot_is_reused_only_after_its_key_expired_and_memory_stays_bounded() -> None:
    clock = FakeMonotonic()
    heap = DueHeap(recent_s=60, monotonic=clock)
    first = entry()
    heap.add([first])
    [popped] = heap.pop_due(TS0, 10)
    heap.settle([popped])
    heap.add([entry(at=1)])
    [other] = heap.pop_due(TS0 + 1, 10)
    assert other.slot != popped.slot  # the settled key still holds its slot
    heap.settle([other])
    clock.t = 61
    heap.add([entry(at=2)])
    [reused] = heap.pop_due(TS0 + 2, 10)
    assert reused.slot in (popped.slot, other.slot) and reused.generation > popped.generation
    heap.forget([popped])  # the old object no longer names a live entry
    assert len(heap) == 1
    # Rounds of add, pop, settle and expiry keep reusing the same slots.
    for round_ in range(10):
        heap.add([entry(at=10 + round_) for _ in range(5000)])
        while batch := heap.pop_due(TS0 + 10 + round_, 2000):
            heap.settle(batch)
        clock.t += 61
    assert len(heap._state) <= 3 * 5000


def test_an_entry_popped_before_its_shard_was_dropped_is_stale_after_the_row_is_added_again() -> None:
    heap = DueHeap()
    e = entry(shard=2, revision=1)
    heap.add([e])
    [old] = heap.pop_due(TS0, 10)
    assert heap.drop_shards([2]) == 1
    assert heap.add([replace(e, revision=2)]) == 1
    [new] = heap.pop_due(TS0, 10)
    assert new.slot == old.slot and new.generation != old.generation and new.revision == 2
    heap.requeue([old])
    heap.hold([old])
    heap.forget([old])
    heap.settle([old])
    assert len(heap) == 1 and heap.pop_due(TS0 + 100, 10) == []  # none of it touched the new entry
    heap.requeue([new])
    assert heap.pop_due(TS0, 10) == [new]


def test_dropped_entries_still_waiting_in_a_bucket_are_not_popped_again_when_their_slots_return() -> None:
    heap = DueHeap()
    lost = [entry(shard=1, at=i) for i in range(10)]
    kept = [entry(shard=2, at=i) for i in range(20)]
    heap.add(lost + kept)
    assert heap.drop_shards([1]) == 10
    assert heap.add([replace(e, revision=2) for e in lost]) == 10
    popped = heap.pop_due(TS0 + 100, 100)
    assert len(popped) == 30 and len(set(popped)) == 30
    assert sorted(e.revision for e in popped if e.shard_id == 1) == [2] * 10


def test_the_key_index_grows_shrinks_and_reuses_tombstones_without_losing_a_key() -> None:
    heap = DueHeap()
    entries = [entry(at=i % 50) for i in range(20_000)]
    assert heap.add(entries) == 20_000
    grown = len(heap._table)
    assert grown >= 30_000  # at most two thirds full
    heap.forget(entries[:19_000])
    assert len(heap._table) < grown // 4  # rebuilt smaller, tombstones gone
    assert heap.add(entries) == 19_000  # the forgotten keys load again, the others are known
    # Churn: keys come and go while few stay; tombstones must not fill the table.
    for _ in range(20):
        churn = [entry(at=100) for _ in range(1000)]
        assert heap.add(churn) == 1000
        heap.forget(churn)
    assert heap.add(entries) == 0 and len(heap) == 20_000
    assert len(heap._table) <= 65_536


def test_a_herd_of_100k_at_one_instant_pops_fairly_and_intact() -> None:
    hog = [entry(A, quota=10**6) for _ in range(90_000)]
    small_tenants = [uuid.UUID(int=1000 + i) for i in range(100)]
    small = [entry(t, quota=10**6) for t in small_tenants for _ in range(100)]
    heap = DueHeap()
    heap.add(hog + small)
    popped: list[DueEntry] = []
    while batch := heap.pop_due(TS0, 2000):
        popped.extend(batch)
        heap.settle(batch)
    assert len(popped) == 100_000 and set(popped) == set(hog + small)  # every field as loaded
    first = popped[:10_100]  # rank k = 0..99: one of each of the 101 tenants per rank
    assert sum(e.tenant_id == A for e in first) == 100
    assert [e.tenant_id for e in popped[10_100:]] == [A] * 89_900
    for k in range(100):  # every small tenant has its k-th turn before anyone's (k+1)-th
        assert len({e.tenant_id for e in first[101 * k : 101 * (k + 1)]}) == 101
    assert [e for e in popped if e.tenant_id == A] == hog  # a tenant's own entries keep their order


def test_requeued_entries_go_before_the_rest_of_their_instant() -> None:
    heap = DueHeap()
    now = [entry(A, at=10) for _ in range(3)] + [entry(B, at=10) for _ in range(3)]
    later = entry(C, at=11)
    heap.add([*now, later])
    first = heap.pop_due(TS0 + 10, 3)  # A's first, B's first, A's second
    heap.requeue(first[2:])
    again = heap.pop_due(TS0 + 20, 100)
    assert again[0] == first[2]  # ahead of B's second, which shares its rank
    assert again[-1] == later and len(again) == 5


def test_held_entries_wait_until_due_and_then_go_before_work_of_that_instant() -> None:
    heap = DueHeap()
    held = [entry(A, at=10) for _ in range(2)]
    heap.add(held)
    popped = heap.pop_due(TS0 + 5, 10, ahead_s=5.0)  # popped 5 s ahead
    heap.hold(popped)
    soon, same_instant = entry(B, at=12), [entry(B, at=10) for _ in range(2)]
    heap.add([soon, *same_instant])
    assert heap.pop_due(TS0 + 5, 10, ahead_s=5.0) == same_instant  # due at 10 too, but not held
    assert heap.pop_due(TS0 + 9.9, 10, ahead_s=30.0) == [soon]  # however far ahead the pop reaches
    assert heap.next_wake_ts(ahead_s=30.0) == TS0 + 10 and heap.next_wake_ts() == TS0 + 10
    assert heap.pop_due(TS0 + 10, 10, ahead_s=5.0) == held


def test_an_entry_arriving_after_its_instant_was_sorted_still_takes_its_turn() -> None:
    heap = DueHeap()
    heap.add([entry(A) for _ in range(4)])
    assert [e.tenant_id for e in heap.pop_due(TS0, 1)] == [A]  # the instant's bucket is sorted now
    heap.add([entry(B), entry(A, at=-30)])  # B's first at this instant, and an overdue one
    assert [e.tenant_id for e in heap.pop_due(TS0, 10)] == [A, B, A, A, A]
    assert heap.pop_due(TS0, 10) == []


def test_next_wake_is_the_earliest_entry_even_before_its_bucket_is_sorted() -> None:
    heap = DueHeap()
    heap.add([entry(at=7.25), entry(at=3.5)])
    assert heap.next_wake_ts() == TS0 + 3.5
    heap.add([entry(at=3.25)])
    assert heap.next_wake_ts() == TS0 + 3.25
    assert heap.pop_due(TS0 + 3.3, 10)[0].next_run_at == T0 + timedelta(seconds=3.25)
    assert heap.next_wake_ts() == TS0 + 3.5


def test_held_entries_of_a_dropped_shard_never_come_back() -> None:
    heap = DueHeap()
    heap.add([entry(shard=3, at=10)])
    heap.hold(heap.pop_due(TS0, 10, ahead_s=20.0))
    assert len(heap) == 1 and heap.next_wake_ts() == TS0 + 10
    assert heap.drop_shards([3]) == 1
    assert len(heap) == 0 and heap.pop_due(TS0 + 20, 10) == [] and heap.next_wake_ts() is None


def test_due_counts_give_the_sorted_head_then_each_bucket_in_order() -> None:
    heap = DueHeap()
    first, *rest = [entry(at=1), entry(at=2), entry(at=15), *(entry(at=25) for _ in range(3)), entry(at=95)]
    heap.add([first, *rest])
    assert heap.due_counts(TS0 + 30) == [(TS0, 2), (TS0 + 10, 1), (TS0 + 20, 3)]
    assert heap.pop_due(TS0 + 1, 10) == [first]  # the first bucket is sorted now: counted from its head
    assert heap.due_counts(TS0 + 30) == [(TS0 + 2, 1), (TS0 + 10, 1), (TS0 + 20, 3)]
    heap.hold([first])
    assert heap.due_counts(TS0 + 100) == [(TS0 + 2, 1), (TS0 + 10, 1), (TS0 + 20, 3), (TS0 + 90, 1)]


# --- What a slot keeps (docs/scheduler.md, Layout) --------------------------------------------------


def test_popped_entries_carry_every_time_exactly_however_far_apart() -> None:
    clock = FakeMonotonic()
    heap = DueHeap(recent_s=60, monotonic=clock)
    us = timedelta(microseconds=1)
    at = T0 + timedelta(seconds=30)
    odd = [
        DueEntry(0, 1, at.replace(second=0), at, uuid.uuid4(), A, at - timedelta(seconds=86_399)),  # a day's jitter
        DueEntry(0, 1, at.replace(second=0), at, uuid.uuid4(), A, at - 123_456 * us),  # microseconds
        DueEntry(0, 1, at.replace(second=0), at, uuid.uuid4(), A, at + 987_654_321 * us),  # after its run
        DueEntry(0, 1, at.replace(second=0), at, uuid.uuid4(), A, at - timedelta(days=40, microseconds=1)),  # catch-up
        DueEntry(0, 1, at.replace(second=0), at, uuid.uuid4(), A, at + timedelta(days=3000)),
        DueEntry(0, 1, at - timedelta(minutes=5), at, uuid.uuid4(), A, at),  # due_minute not the run's minute
        DueEntry(0, 1, at.replace(second=0), at, uuid.uuid4(), A, at - timedelta(seconds=1 << 31)),
    ]
    assert heap.add(odd) == len(odd)
    popped = heap.pop_due(TS0 + 30, 100)
    assert sorted(popped, key=lambda e: e.job_id) == sorted(odd, key=lambda e: e.job_id)
    for e in popped:
        assert (e.due_minute, e.nominal_at) == next((o.due_minute, o.nominal_at) for o in odd if o.job_id == e.job_id)
    heap.settle(popped)
    clock.t = 61
    heap.add([])  # expires the settled keys
    assert not heap._odd_due and not heap._far_nominal  # the times kept aside went with their slots


def test_past_65535_tenants_and_fences_the_narrow_columns_widen_without_losing_one() -> None:
    heap = DueHeap()
    n = 70_000
    entries = [entry(uuid.UUID(int=10_000 + i), at=i % 7, shard=i % 256, revision=i) for i in range(n)]
    assert heap.add(entries) == n
    popped: list[DueEntry] = []
    while batch := heap.pop_due(TS0 + 10, 5000):
        popped.extend(batch)
    assert len(popped) == n and set(popped) == set(entries)  # every field, tenant, shard and revision too


def test_a_quarter_million_entries_take_at_most_64_bytes_each() -> None:
    """An hour's entries of 100 tenants: the columns, the key index and the order buckets."""
    import tracemalloc

    tenants = [uuid.UUID(int=i) for i in range(1, 101)]
    n = 250_000

    def row(i: int) -> DueEntry:  # as the loader reads them: due_minute is next_run_at's minute
        run = T0 + timedelta(seconds=(i * 7919) % 3600 + 0.25)
        return DueEntry(i % 256, 1, run.replace(second=0, microsecond=0), run, uuid.uuid4(), tenants[i % 100], run)

    pages = [[row(i) for i in range(start, start + 5000)] for start in range(0, n, 5000)]
    tracemalloc.start()
    try:
        heap = DueHeap()
        before, _ = tracemalloc.get_traced_memory()
        for page in pages:
            heap.add(page)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(heap) == n
    assert (after - before) / n <= 64
