"""The due heap's order (app/scheduler/heap.py; docs/scheduler.md): the run-time buckets, the sorted
head bucket and the side heap, held entries, the tenants' deferred FIFOs and token buckets, and
turning popped slots back into ``DueEntry`` objects.
"""

from __future__ import annotations

import heapq
import time
from array import array
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from app.scheduler._heap_parts import (
    _DEAD,
    _DEFERRED,
    _EPOCH,
    _FAR,
    _INFLIGHT,
    _MINUTE_US,
    _QUEUED,
    _US,
    BUCKET_US,
    RECENT_S,
    DueEntry,
    TokenBucket,
    _Fifo,
)
from app.scheduler._heap_slots import _Slots


class _Order(_Slots):
    """The orders a queued slot can sit in, and the live, deferred and dead counts."""

    def __init__(self, *, recent_s: float = RECENT_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(recent_s=recent_s, monotonic=monotonic)
        # Order.
        self._buckets: dict[int, array[int]] = {}  # run_us // BUCKET_US -> slots, in insertion order
        self._bucket_order: list[int] = []  # heap of the bucket numbers in _buckets
        self._bucket_min: tuple[int, int, int] | None = None  # (bucket, slots scanned, earliest run_us)
        self._head_bucket: int | None = None  # the bucket sorted into _head_slots
        self._head_slots = array("i")
        self._head_ranks = array("d")
        self._head_pos = 0
        self._side: list[tuple[int, float, int, int]] = []  # (run_us, rank, sequence, slot)
        self._side_seq = 0
        self._held: list[tuple[int, int, int]] = []  # (run_us, sequence, slot): held until due, not ahead
        self._ranks: dict[tuple[int, int], int] = {}  # (run_us, tenant number) -> entries ranked so far
        # Deferral and quotas, by tenant number.
        self._deferred: dict[int, _Fifo] = {}
        self._token_buckets: dict[int, TokenBucket] = {}
        self._live = 0
        self._deferred_live = 0
        self._dead = 0

    # ------------------------------------------------------------------------------------------
    # Life cycle of a slot
    # ------------------------------------------------------------------------------------------

    def _retire(self, slot: int) -> None:
        """A live entry leaves: out of the index and its shard's list; freed now or when its order reaches it."""
        self._unindex(slot)
        self._unlink(slot)
        self._live -= 1
        state = self._state[slot]
        if state == _INFLIGHT:
            self._release_slot(slot)
            return
        if state == _DEFERRED:
            self._deferred_live -= 1
        self._state[slot] = _DEAD
        self._dead += 1
        self._bucket_min = None

    def _free_dead(self, slot: int) -> None:
        self._dead -= 1
        self._release_slot(slot)

    # ------------------------------------------------------------------------------------------
    # Order
    # ------------------------------------------------------------------------------------------

    def _rank(self, run_us: int, profile: int) -> float:
        key = (run_us, self._profile_tenant[profile])
        k = self._ranks.get(key, 0)
        self._ranks[key] = k + 1
        return k / self._profile_divisor[profile]

    def _enqueue(self, slot: int, run_us: int, profile: int) -> None:
        bucket = run_us // BUCKET_US
        if self._head_bucket is not None and bucket <= self._head_bucket:
            heapq.heappush(self._side, (run_us, self._rank(run_us, profile), self._side_seq, slot))
            self._side_seq += 1
            return
        slots = self._buckets.get(bucket)
        if slots is None:
            slots = self._buckets[bucket] = array("i")
            heapq.heappush(self._bucket_order, bucket)
        slots.append(slot)

    def _push_side(self, slot: int, at_us: int) -> None:
        """Queue a popped entry again at ``at_us``, before the other entries of that instant."""
        self._state[slot] = _QUEUED
        heapq.heappush(self._side, (at_us, -1.0, self._side_seq, slot))
        self._side_seq += 1

    def _sort_head(self) -> None:
        """Make the earliest bucket the sorted head, ranking its entries in insertion order."""
        bucket = heapq.heappop(self._bucket_order)
        slots = self._buckets.pop(bucket)
        state, run, profiles = self._state, self._run_us, self._profile
        ranks, profile_tenant, divisors = self._ranks, self._profile_tenant, self._profile_divisor
        keys = []
        for i, slot in enumerate(slots):
            if state[slot] == _DEAD:
                self._free_dead(slot)
                continue
            run_us, profile = run[slot], profiles[slot]
            key = (run_us, profile_tenant[profile])  # as _rank, inlined: a herd sorts 100,000 at once
            k = ranks.get(key, 0)
            ranks[key] = k + 1
            keys.append((run_us, k / divisors[profile], i))
        keys.sort()
        self._head_bucket = bucket
        self._head_slots = array("i", [slots[i] for _, _, i in keys])
        self._head_ranks = array("d", [rank for _, rank, _ in keys])
        self._head_pos = 0
        self._bucket_min = None

    def _release_head(self) -> None:
        self._head_bucket = None
        self._head_slots = array("i")
        self._head_ranks = array("d")
        self._head_pos = 0
        # Every rank counted so far is of an instant in the released bucket or before it.
        self._ranks.clear()

    def _take_due(self, now_us: int, n: int) -> list[int]:
        """Take up to ``n`` queued slots due at ``now_us`` out of the order, in order."""
        run, state, side = self._run_us, self._state, self._side
        out: list[int] = []
        while len(out) < n:
            if self._head_pos >= len(self._head_slots):
                if self._head_bucket is not None:
                    self._release_head()
                if self._bucket_order and self._bucket_order[0] * BUCKET_US <= now_us:
                    self._sort_head()
                    continue
            pos = self._head_pos
            if pos < len(self._head_slots):
                slot = self._head_slots[pos]
                run_us = run[slot]
                if side and (side[0][0], side[0][1]) < (run_us, self._head_ranks[pos]):
                    if side[0][0] > now_us:
                        break
                    slot = heapq.heappop(side)[3]
                else:
                    if run_us > now_us:
                        break
                    self._head_pos = pos + 1
            elif side and side[0][0] <= now_us:
                slot = heapq.heappop(side)[3]
            else:
                break
            if state[slot] == _DEAD:
                self._free_dead(slot)
            else:
                out.append(slot)
        return out

    def _earliest_bucket_us(self) -> int | None:
        """The earliest run time in the unsorted buckets (scanning only what was added since last asked)."""
        state, run = self._state, self._run_us
        while self._bucket_order:
            bucket = self._bucket_order[0]
            slots = self._buckets[bucket]
            cached = self._bucket_min
            start, best = (cached[1], cached[2]) if cached is not None and cached[0] == bucket else (0, -1)
            for i in range(start, len(slots)):
                slot = slots[i]
                if state[slot] != _DEAD and (best < 0 or run[slot] < best):
                    best = run[slot]
            if best >= 0:
                self._bucket_min = (bucket, len(slots), best)
                return best
            # Only dead entries: the bucket goes.
            heapq.heappop(self._bucket_order)
            for slot in self._buckets.pop(bucket):
                self._free_dead(slot)
            self._bucket_min = None
        return None

    def _compact(self) -> None:
        """Free every dead slot now, taking it out of whichever order holds it."""
        state = self._state

        def keep(slot: int) -> bool:
            if state[slot] == _DEAD:
                self._release_slot(slot)
                return False
            return True

        buckets = {}
        for bucket, slots in self._buckets.items():
            kept = array("i", [s for s in slots if keep(s)])
            if kept:
                buckets[bucket] = kept
        self._buckets = buckets
        self._bucket_order = list(buckets)
        heapq.heapify(self._bucket_order)
        pos = self._head_pos
        pairs = [(s, r) for s, r in zip(self._head_slots[pos:], self._head_ranks[pos:], strict=True) if keep(s)]
        self._head_slots = array("i", [s for s, _ in pairs])
        self._head_ranks = array("d", [r for _, r in pairs])
        self._head_pos = 0
        self._side = [item for item in self._side if keep(item[3])]
        heapq.heapify(self._side)
        self._held = [item for item in self._held if keep(item[2])]
        heapq.heapify(self._held)
        for tenant, fifo in list(self._deferred.items()):
            kept_slots = array("i", [s for s in fifo.slots[fifo.head :] if keep(s)])
            if kept_slots:
                fifo.slots, fifo.head = kept_slots, 0
            else:
                del self._deferred[tenant]
        self._dead = 0
        self._bucket_min = None

    # ------------------------------------------------------------------------------------------
    # Popped entries
    # ------------------------------------------------------------------------------------------

    def _entries(self, slots: list[int]) -> list[DueEntry]:
        """Popped slots as DueEntry objects (datetimes shared between entries of the same instant)."""
        hi, lo, run, nominals = self._job_hi, self._job_lo, self._run_us, self._nominal
        far_nominal, odd_due = self._far_nominal, self._odd_due
        fences, profiles, generation = self._fence, self._profile, self._generation
        fence_shard, fence_revision = self._fence_shard, self._fence_revision
        tenant_ids, profile_tenant = self._tenant_ids, self._profile_tenant
        weights, quotas = self._profile_weight, self._profile_quota
        datetimes: dict[int, datetime] = {}
        out = []
        for slot in slots:
            run_us, code = run[slot], nominals[slot]  # as _nominal_us and _due_us, inlined
            if code & 1:
                nominal = run_us - (code >> 1) * 1_000_000
            elif code == _FAR:
                nominal = far_nominal[slot]
            else:
                nominal = run_us - (code >> 1)
            due_us = odd_due.get(slot) if odd_due else None
            if due_us is None:
                due_us = run_us - run_us % _MINUTE_US
            run_at = datetimes.get(run_us)
            if run_at is None:
                run_at = datetimes[run_us] = _EPOCH + _US * run_us
            nominal_at = datetimes.get(nominal)
            if nominal_at is None:
                nominal_at = datetimes[nominal] = _EPOCH + _US * nominal
            due_minute = datetimes.get(due_us)
            if due_minute is None:
                due_minute = datetimes[due_us] = _EPOCH + _US * due_us
            fence, profile = fences[slot], profiles[slot]
            out.append(
                DueEntry(
                    fence_shard[fence],
                    fence_revision[fence],
                    due_minute,
                    run_at,
                    UUID(int=(hi[slot] << 64) | lo[slot]),
                    tenant_ids[profile_tenant[profile]],
                    nominal_at,
                    weights[profile],
                    quotas[profile],
                    slot,
                    generation[slot],
                )
            )
        return out

    def _bucket(self, profile: int, now_ts: float) -> TokenBucket:
        tenant, rate = self._profile_tenant[profile], self._profile_quota[profile]
        bucket = self._token_buckets.get(tenant)
        if bucket is None:
            bucket = self._token_buckets[tenant] = TokenBucket(rate, now_ts)
        elif bucket.rate != rate:
            bucket.refill(now_ts)
            bucket.rate = float(rate)
            bucket.tokens = min(bucket.tokens, bucket.rate)
        return bucket

    def _live_head(self, fifo: _Fifo) -> int:
        """The first live slot of a deferred FIFO (freeing dead ones before it), or -1."""
        while len(fifo):
            slot = fifo.peek()
            if self._state[slot] != _DEAD:
                return slot
            self._free_dead(fifo.pop())
        return -1
