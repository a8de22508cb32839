"""The in-memory queue of due_index entries of the shards this process owns.

Ordering: by run time; entries due at the same instant are interleaved across tenants
(round-robin, weighted by tenant weight: the k-th entry of a tenant at instant T sorts at rank
k / weight), so a tenant with 100,000 jobs at midnight does not push another tenant's few to
the back. A per-tenant token bucket (tenants.max_dispatch_per_s, burst of one second) defers the
excess of a tenant over its quota: deferred entries keep their order and go first as soon as the
tenant has tokens again, while other tenants pass.

Every entry is known by its key (job_id, next_run_at) until it is settled: the loader's repeated
scans cannot add it twice, and an entry settled a moment ago is ignored for ``recent_s`` (a scan
that read the row just before its dispatch committed would otherwise bring it back). Entries of
lost shards are dropped at once.

Layout. A scheduler may hold a million upcoming entries (the target: at most 150 B each), and a
Python object per entry costs more than that before it holds anything (a dataclass with nine
fields, two UUIDs and three datetimes, a heap tuple and index keys came to about 830 B). So the
heap keeps no object per entry: an entry lives in a *slot*, an index into parallel ``array``
columns (struct of arrays), and becomes a ``DueEntry`` again only when it is popped.

- Columns per slot: the job id as two unsigned 64-bit halves; next_run_at, nominal_at and
  due_minute as int64 microseconds since the epoch (exact; popped entries carry UTC datetimes);
  a profile index into a small table of (tenant, weight, max_dispatch_per_s) as loaded; a fence
  index into a small table of (shard_id, revision); a state byte; a generation; and the links
  of a doubly linked list per shard, so ``drop_shards`` visits only the shard's entries. About
  61 B a slot. Free slots are kept on a free list and reused; a slot's generation goes up each
  time it is taken, and a popped ``DueEntry`` carries (slot, generation), so settle, forget,
  requeue and hold find their slot in O(1), and an object that outlived its slot (popped, its
  shard dropped, the row re-added under a new revision) is recognised as stale.
- The key index: an open-addressing hash table (linear probing, tombstones) of slot numbers in an
  ``array('i')``, at most two thirds full, about 8 B an entry.
- Recently settled keys stay in their slot in state RECENT, with the settle time (monotonic
  microseconds) in the nominal_at column, which a settled entry no longer needs. A FIFO of
  settle batches frees them once ``recent_s`` has passed.
- Order: one ``array('i')`` of slots per ten seconds of run time (a bucket, 4 B an entry, in
  insertion order) and a heap of bucket numbers. The earliest bucket is sorted by (run time,
  rank, insertion) only when the time asked for reaches it (the loader fills the next two
  minutes in pages; sorting earlier would send the rest of a herd's pages down the slower path
  below), and the ranks are computed then, in insertion order. Entries that arrive for the sorted
  bucket or an earlier one (a rank continues from the sorted bucket's count; counts start afresh
  once pop has moved past the bucket), and entries requeued, go to a small heap of tuples
  that pop merges with the sorted bucket. A
  requeued entry sorts before the other entries of its instant. ``next_wake_ts`` scans
  the earliest unsorted bucket for its earliest entry, only what was added since it last asked.
- Held entries (popped ahead of time, but to be decided only when due): a heap by run time that
  pop moves to the side heap, as requeued, once they are due at its ``now_ts``, whatever it pops ahead.
- Deferred entries: a FIFO of slots per tenant.
- A slot sits in at most one of these orders (a bucket, the sorted bucket, the side heap, the
  held heap, a deferred FIFO). An entry dropped or forgotten while it waits there becomes DEAD: its key is
  out of the index at once, and the slot is freed when the order reaches it (or when dead slots
  outnumber live ones and the orders are compacted), so an order never holds a slot that was
  reused.

loadtest/heap_memory.py measures it: about 80 B an entry with a million loaded (830 B before).
After a herd has drained the columns keep their peak length (free slots are reused); the key
index shrinks.
"""

from __future__ import annotations

import heapq
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from uuid import UUID

# How long a settled key is remembered, so a stale scan cannot resurrect it.
RECENT_S = 120.0
# The run-time width of an order bucket: wide enough that a bucket's own overhead (~200 B) is
# shared by many entries even when entries are spread thinly, narrow enough that few arrive for a
# bucket after it was sorted (those take the slower side heap).
BUCKET_US = 10_000_000
# Settles within this long of the open settle batch join it (a batch is freed once its last settle expired).
RECENT_BATCH_US = 1_000_000
# Slots are added to the columns this many at a time.
GROW_SLOTS = 4096
# The key index never shrinks below this many cells.
MIN_TABLE = 16

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
_LOW64 = (1 << 64) - 1
_GEN_MASK = (1 << 32) - 1

# Slot states. QUEUED, DEFERRED and INFLIGHT are the live ones (counted in len()).
_FREE = 0
_QUEUED = 1  # in a bucket, the sorted bucket or the side heap
_DEFERRED = 2  # in its tenant's deferred FIFO
_INFLIGHT = 3  # popped, not yet settled, forgotten, requeued or held
_RECENT = 4  # settled; only the key (and the settle time) is kept
_DEAD = 5  # dropped or forgotten while an order still refers to the slot

# Key index cells: a slot number, or one of these.
_EMPTY = -1
_TOMBSTONE = -2


@dataclass(frozen=True, slots=True)
class DueEntry:
    """One due_index row as loaded, plus the shard revision it was loaded under (its fence).

    ``slot`` and ``generation`` say where the heap kept a popped entry; an entry built elsewhere
    has slot -1 and is found by its key.
    """

    shard_id: int
    revision: int
    due_minute: datetime
    next_run_at: datetime
    job_id: UUID
    tenant_id: UUID
    nominal_at: datetime
    weight: int = 1
    max_dispatch_per_s: int = 5000
    slot: int = field(default=-1, compare=False, repr=False)
    generation: int = field(default=0, compare=False, repr=False)

    @property
    def key(self) -> tuple[UUID, datetime]:
        return (self.job_id, self.next_run_at)

    @property
    def run_ts(self) -> float:
        return self.next_run_at.timestamp()


class TokenBucket:
    """``rate`` tokens per second, holding at most one second's worth."""

    __slots__ = ("rate", "tokens", "at")

    def __init__(self, rate: float, now_ts: float) -> None:
        self.rate = float(rate)
        self.tokens = float(rate)
        self.at = now_ts

    def refill(self, now_ts: float) -> None:
        if now_ts > self.at:
            self.tokens = min(self.rate, self.tokens + (now_ts - self.at) * self.rate)
        self.at = now_ts

    def take(self, now_ts: float) -> bool:
        self.refill(now_ts)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def next_token_ts(self) -> float:
        return self.at + max(0.0, 1.0 - self.tokens) / self.rate


def _micros(at: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime."""
    return (at - _EPOCH) // _US


def _micros_at_or_before(ts: float) -> int:
    """The largest microsecond count ``us`` with ``us / 1e6 <= ts`` (what ``run_ts <= ts`` means)."""
    us = int(ts * 1_000_000)
    while us / 1_000_000 > ts:
        us -= 1
    while (us + 1) / 1_000_000 <= ts:
        us += 1
    return us


class _Fifo:
    """Slots in arrival order; the consumed prefix is cut off once it is half the array."""

    __slots__ = ("slots", "head")

    def __init__(self) -> None:
        self.slots = array("i")
        self.head = 0

    def __len__(self) -> int:
        return len(self.slots) - self.head

    def peek(self) -> int:
        return self.slots[self.head]

    def pop(self) -> int:
        slot = self.slots[self.head]
        self.head += 1
        if self.head >= 1024 and 2 * self.head >= len(self.slots):
            del self.slots[:self.head]
            self.head = 0
        return slot


class _RecentBatch:
    """Slots settled between ``first_us`` and ``last_us`` (monotonic microseconds)."""

    __slots__ = ("first_us", "last_us", "slots")

    def __init__(self, now_us: int) -> None:
        self.first_us = now_us
        self.last_us = now_us
        self.slots = array("i")


class DueHeap:
    """Due entries in dispatch order; see the module docstring for the model and the layout."""

    def __init__(self, *, recent_s: float = RECENT_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._recent_us = round(recent_s * 1_000_000)
        self._monotonic = monotonic
        # Columns, indexed by slot.
        self._job_hi = array("Q")
        self._job_lo = array("Q")
        self._run_us = array("q")
        self._nominal_us = array("q")  # a RECENT slot keeps its settle time (monotonic us) here
        self._due_us = array("q")
        self._profile = array("I")
        self._fence = array("I")
        self._state = bytearray()
        self._generation = array("I")
        self._shard_next = array("i")
        self._shard_prev = array("i")
        self._free = array("i")
        # Small tables the columns point into.
        self._tenant_index: dict[int, int] = {}  # tenant UUID as int -> tenant number
        self._tenant_ids: list[UUID] = []
        self._profile_index: dict[tuple[int, int, int], int] = {}  # (tenant number, weight, quota)
        self._profile_tenant: list[int] = []
        self._profile_weight: list[int] = []
        self._profile_divisor: list[int] = []  # max(1, weight): the rank of the k-th entry is k / divisor
        self._profile_quota: list[int] = []
        self._fence_index: dict[tuple[int, int], int] = {}  # (shard_id, revision) -> fence number
        self._fence_shard: list[int] = []
        self._fence_revision: list[int] = []
        self._fence_free: list[int] = []
        self._shard_head: dict[int, int] = {}  # shard_id -> first slot of its list of live entries
        # The key index.
        self._table = array("i", [_EMPTY]) * MIN_TABLE
        self._table_live = 0  # cells holding a slot
        self._table_used = 0  # cells holding a slot or a tombstone
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
        self._recent: deque[_RecentBatch] = deque()
        self._live = 0
        self._deferred_live = 0
        self._dead = 0

    def __len__(self) -> int:
        """Unsettled entries: queued, deferred or being dispatched."""
        return self._live

    @property
    def deferred_count(self) -> int:
        return self._deferred_live

    # ------------------------------------------------------------------------------------------
    # Slots and the key index
    # ------------------------------------------------------------------------------------------

    def _grow(self) -> None:
        start = len(self._state)
        for column in (self._job_hi, self._job_lo, self._run_us, self._nominal_us, self._due_us,
                       self._profile, self._fence, self._generation, self._shard_next, self._shard_prev):
            column.frombytes(bytes(GROW_SLOTS * column.itemsize))
        self._state.extend(bytes(GROW_SLOTS))
        self._free.extend(range(start + GROW_SLOTS - 1, start - 1, -1))

    def _take_slot(self) -> int:
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._generation[slot] = (self._generation[slot] + 1) & _GEN_MASK
        return slot

    def _release_slot(self, slot: int) -> None:
        self._state[slot] = _FREE
        self._free.append(slot)

    def _probe(self, hi: int, lo: int, run_us: int) -> tuple[int, int]:
        """(cell, slot) of the key; (cell to insert at, -1) when the key is not indexed."""
        table = self._table
        mask = len(table) - 1
        cell = hash((hi, lo, run_us)) & mask
        insert_at = -1
        while True:
            slot = table[cell]
            if slot == _EMPTY:
                return (cell if insert_at < 0 else insert_at), -1
            if slot == _TOMBSTONE:
                if insert_at < 0:
                    insert_at = cell
            elif self._run_us[slot] == run_us and self._job_lo[slot] == lo and self._job_hi[slot] == hi:
                return cell, slot
            cell = (cell + 1) & mask

    def _index(self, cell: int, slot: int) -> None:
        if self._table[cell] == _EMPTY:
            self._table_used += 1
        self._table[cell] = slot
        self._table_live += 1
        if 3 * self._table_used >= 2 * len(self._table):
            self._rebuild_table()

    def _unindex(self, slot: int) -> None:
        table = self._table
        mask = len(table) - 1
        cell = hash((self._job_hi[slot], self._job_lo[slot], self._run_us[slot])) & mask
        while table[cell] != slot:
            cell = (cell + 1) & mask
        table[cell] = _TOMBSTONE
        self._table_live -= 1
        if 8 * self._table_live < len(table) and len(table) > MIN_TABLE:
            self._rebuild_table()

    def _rebuild_table(self) -> None:
        """Rehash into a table at most half full, leaving the tombstones behind."""
        size = MIN_TABLE
        while size < 2 * self._table_live:
            size *= 2
        old = self._table
        table = array("i", [_EMPTY]) * size
        mask = size - 1
        hi, lo, run = self._job_hi, self._job_lo, self._run_us
        for slot in old:
            if slot >= 0:
                cell = hash((hi[slot], lo[slot], run[slot])) & mask
                while table[cell] != _EMPTY:
                    cell = (cell + 1) & mask
                table[cell] = slot
        self._table = table
        self._table_used = self._table_live

    def _key_slot(self, entry: DueEntry) -> int:
        ji = entry.job_id.int
        return self._probe(ji >> 64, ji & _LOW64, _micros(entry.next_run_at))[1]

    def _resolve(self, entry: DueEntry) -> int:
        """The slot of a live entry (queued, deferred or in flight), else -1."""
        slot = entry.slot
        if slot < 0:
            slot = self._key_slot(entry)
            if slot < 0:
                return -1
        elif slot >= len(self._state) or self._generation[slot] != entry.generation:
            return -1
        return slot if _QUEUED <= self._state[slot] <= _INFLIGHT else -1

    # ------------------------------------------------------------------------------------------
    # Tables
    # ------------------------------------------------------------------------------------------

    def _profile_of(self, entry: DueEntry) -> int:
        tenant_int = entry.tenant_id.int
        tenant = self._tenant_index.get(tenant_int)
        if tenant is None:
            tenant = self._tenant_index[tenant_int] = len(self._tenant_ids)
            self._tenant_ids.append(entry.tenant_id)
        key = (tenant, entry.weight, entry.max_dispatch_per_s)
        profile = self._profile_index.get(key)
        if profile is None:
            profile = self._profile_index[key] = len(self._profile_tenant)
            self._profile_tenant.append(tenant)
            self._profile_weight.append(entry.weight)
            self._profile_divisor.append(max(1, entry.weight))
            self._profile_quota.append(entry.max_dispatch_per_s)
        return profile

    def _fence_of(self, shard_id: int, revision: int) -> int:
        key = (shard_id, revision)
        fence = self._fence_index.get(key)
        if fence is None:
            if self._fence_free:
                fence = self._fence_free.pop()
                self._fence_shard[fence], self._fence_revision[fence] = key
            else:
                fence = len(self._fence_shard)
                self._fence_shard.append(shard_id)
                self._fence_revision.append(revision)
            self._fence_index[key] = fence
        return fence

    # ------------------------------------------------------------------------------------------
    # Shard lists
    # ------------------------------------------------------------------------------------------

    def _link(self, slot: int, shard_id: int) -> None:
        first = self._shard_head.get(shard_id, -1)
        self._shard_next[slot] = first
        self._shard_prev[slot] = -1
        if first >= 0:
            self._shard_prev[first] = slot
        self._shard_head[shard_id] = slot

    def _unlink(self, slot: int) -> None:
        after, before = self._shard_next[slot], self._shard_prev[slot]
        if before >= 0:
            self._shard_next[before] = after
        else:
            shard_id = self._fence_shard[self._fence[slot]]
            if after >= 0:
                self._shard_head[shard_id] = after
            else:
                del self._shard_head[shard_id]
        if after >= 0:
            self._shard_prev[after] = before

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

    def _now_us(self) -> int:
        return round(self._monotonic() * 1_000_000)

    def _recent_batch(self, now_us: int) -> _RecentBatch:
        """The settle batch that slots settled at ``now_us`` join."""
        if not self._recent or now_us - self._recent[-1].first_us >= RECENT_BATCH_US:
            self._recent.append(_RecentBatch(now_us))
        batch = self._recent[-1]
        batch.last_us = max(batch.last_us, now_us)
        return batch

    def _note_recent(self, slot: int, now_us: int) -> None:
        self._state[slot] = _RECENT
        self._nominal_us[slot] = now_us
        self._recent_batch(now_us).slots.append(slot)

    def _remember(self, entry: DueEntry, now_us: int) -> None:
        """Keep an entry's key as recently settled, unless the key is live in another slot."""
        ji = entry.job_id.int
        hi, lo, run_us = ji >> 64, ji & _LOW64, _micros(entry.next_run_at)
        cell, slot = self._probe(hi, lo, run_us)
        if slot >= 0:
            if self._state[slot] == _RECENT:
                self._note_recent(slot, now_us)
            return
        slot = self._take_slot()
        self._job_hi[slot], self._job_lo[slot], self._run_us[slot] = hi, lo, run_us
        self._note_recent(slot, now_us)
        self._index(cell, slot)

    def _expire_recent(self, now_us: int) -> None:
        horizon = now_us - self._recent_us
        state, settled_at = self._state, self._nominal_us
        while self._recent and self._recent[0].last_us <= horizon:
            for slot in self._recent.popleft().slots:
                # Skip slots settled again later (a later batch has them) or reused since.
                if state[slot] == _RECENT and settled_at[slot] <= horizon:
                    self._unindex(slot)
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
            kept_slots = array("i", [s for s in fifo.slots[fifo.head:] if keep(s)])
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
        hi, lo, run, nominal, due = self._job_hi, self._job_lo, self._run_us, self._nominal_us, self._due_us
        fences, profiles, generation = self._fence, self._profile, self._generation
        fence_shard, fence_revision = self._fence_shard, self._fence_revision
        tenant_ids, profile_tenant = self._tenant_ids, self._profile_tenant
        weights, quotas = self._profile_weight, self._profile_quota
        datetimes: dict[int, datetime] = {}
        out = []
        for slot in slots:
            run_us, nominal_us, due_us = run[slot], nominal[slot], due[slot]
            run_at = datetimes.get(run_us)
            if run_at is None:
                run_at = datetimes[run_us] = _EPOCH + _US * run_us
            nominal_at = datetimes.get(nominal_us)
            if nominal_at is None:
                nominal_at = datetimes[nominal_us] = _EPOCH + _US * nominal_us
            due_minute = datetimes.get(due_us)
            if due_minute is None:
                due_minute = datetimes[due_us] = _EPOCH + _US * due_us
            fence, profile = fences[slot], profiles[slot]
            out.append(DueEntry(fence_shard[fence], fence_revision[fence], due_minute, run_at,
                                UUID(int=(hi[slot] << 64) | lo[slot]), tenant_ids[profile_tenant[profile]],
                                nominal_at, weights[profile], quotas[profile], slot, generation[slot]))
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

    # ------------------------------------------------------------------------------------------
    # The interface
    # ------------------------------------------------------------------------------------------

    def add(self, entries: Iterable[DueEntry]) -> int:
        """Queue entries not already known; returns how many were new."""
        now_us = self._now_us()
        self._expire_recent(now_us)
        added = 0
        state = self._state
        for entry in entries:
            ji = entry.job_id.int
            hi, lo, run_us = ji >> 64, ji & _LOW64, _micros(entry.next_run_at)
            cell, slot = self._probe(hi, lo, run_us)
            if slot >= 0:
                if state[slot] != _RECENT or now_us - self._nominal_us[slot] < self._recent_us:
                    continue
                self._generation[slot] = (self._generation[slot] + 1) & _GEN_MASK  # a new life
            else:
                slot = self._take_slot()
                self._job_hi[slot], self._job_lo[slot], self._run_us[slot] = hi, lo, run_us
                self._index(cell, slot)
            profile = self._profile_of(entry)
            self._nominal_us[slot] = _micros(entry.nominal_at)
            self._due_us[slot] = _micros(entry.due_minute)
            self._profile[slot] = profile
            self._fence[slot] = self._fence_of(entry.shard_id, entry.revision)
            state[slot] = _QUEUED
            self._link(slot, entry.shard_id)
            self._enqueue(slot, run_us, profile)
            self._live += 1
            added += 1
        return added

    def pop_due(self, now_ts: float, limit: int, ahead_s: float = 0.0) -> list[DueEntry]:
        """Up to ``limit`` entries due by ``now_ts + ahead_s`` that their tenants' quotas allow, fairly ordered.

        Quotas' token buckets run on ``now_ts``, and held entries come back only once due at ``now_ts``.
        Popped entries stay known (in flight) until ``settle``, ``forget``, ``requeue`` or ``hold``.
        """
        out: list[int] = []
        state = self._state
        held, due_now_us = self._held, _micros_at_or_before(now_ts)
        while held and held[0][0] <= due_now_us:
            run_us, _, slot = heapq.heappop(held)
            if state[slot] == _DEAD:
                self._free_dead(slot)
            else:
                self._push_side(slot, run_us)
        # Deferred entries are older than anything queued: they go first, round-robin.
        while self._deferred and len(out) < limit:
            progressed = False
            for tenant in list(self._deferred):
                fifo = self._deferred[tenant]
                slot = self._live_head(fifo)
                if slot < 0:
                    del self._deferred[tenant]
                    continue
                if len(out) < limit and self._bucket(self._profile[slot], now_ts).take(now_ts):
                    fifo.pop()
                    state[slot] = _INFLIGHT
                    self._deferred_live -= 1
                    out.append(slot)
                    progressed = True
                    if not len(fifo):
                        del self._deferred[tenant]
            if not progressed:
                break
        now_us = _micros_at_or_before(now_ts + ahead_s)
        profiles, profile_tenant, quotas = self._profile, self._profile_tenant, self._profile_quota
        while len(out) < limit:
            due = self._take_due(now_us, limit - len(out))
            if not due:
                break
            for slot in due:
                profile = profiles[slot]
                tenant = profile_tenant[profile]
                waiting = self._deferred.get(tenant)
                if waiting is None:
                    bucket = self._token_buckets.get(tenant)
                    if bucket is None or bucket.rate != quotas[profile]:
                        bucket = self._bucket(profile, now_ts)
                    if bucket.take(now_ts):
                        state[slot] = _INFLIGHT
                        out.append(slot)
                        continue
                    waiting = self._deferred[tenant] = _Fifo()
                waiting.slots.append(slot)
                state[slot] = _DEFERRED
                self._deferred_live += 1
        return self._entries(out)

    def next_wake_ts(self, ahead_s: float = 0.0) -> float | None:
        """When ``pop_due(now_ts, ..., ahead_s)`` may next return something, as a ``now_ts``.

        The earliest queued entry ``ahead_s`` before it is due, a held entry when it is due, or a
        deferred tenant's next token. With ``ahead_s`` 0: the earliest time some waiting work is due.
        """
        candidates: list[float] = []
        state = self._state
        while self._head_pos < len(self._head_slots) and state[self._head_slots[self._head_pos]] == _DEAD:
            self._free_dead(self._head_slots[self._head_pos])
            self._head_pos += 1
        if self._head_pos < len(self._head_slots):
            candidates.append(self._run_us[self._head_slots[self._head_pos]] / 1_000_000)
        else:
            earliest = self._earliest_bucket_us()
            if earliest is not None:
                candidates.append(earliest / 1_000_000)
        while self._side and state[self._side[0][3]] == _DEAD:
            self._free_dead(heapq.heappop(self._side)[3])
        if self._side:
            candidates.append(self._side[0][0] / 1_000_000)
        candidates = [ts - ahead_s for ts in candidates]
        while self._held and state[self._held[0][2]] == _DEAD:
            self._free_dead(heapq.heappop(self._held)[2])
        if self._held:
            candidates.append(self._held[0][0] / 1_000_000)
        for tenant, fifo in self._deferred.items():
            bucket = self._token_buckets.get(tenant)
            if bucket is not None and self._live_head(fifo) >= 0:
                candidates.append(bucket.next_token_ts())
        return min(candidates) if candidates else None

    def settle(self, entries: Iterable[DueEntry]) -> None:
        """The entries' rows were dispatched (or had vanished): forget them, ignoring stale reloads."""
        now_us = self._now_us()
        self._expire_recent(now_us)
        batch = self._recent_batch(now_us)
        state, settled_at = self._state, self._nominal_us
        for entry in entries:
            slot = self._resolve(entry)
            if slot >= 0 and state[slot] == _INFLIGHT:
                self._unlink(slot)
                self._live -= 1
                state[slot] = _RECENT
                settled_at[slot] = now_us
                batch.slots.append(slot)
                continue
            if slot >= 0:
                self._retire(slot)  # settled before it was popped: it must not be popped now
            self._remember(entry, now_us)

    def forget(self, entries: Iterable[DueEntry]) -> None:
        """Drop entries without remembering them (fenced: whoever owns the shard now reloads them)."""
        for entry in entries:
            slot = self._resolve(entry)
            if slot >= 0:
                self._retire(slot)

    def hold(self, entries: Iterable[DueEntry]) -> None:
        """Queue popped entries again for when they are due: a pop ahead of time does not find them."""
        for entry in entries:
            slot = self._resolve(entry)
            if slot >= 0 and self._state[slot] == _INFLIGHT:
                self._state[slot] = _QUEUED
                heapq.heappush(self._held, (self._run_us[slot], self._side_seq, slot))
                self._side_seq += 1

    def due_counts(self, until_ts: float) -> list[tuple[float, int]]:
        """Queued entries by when they are due, up to ``until_ts``: (a span's start, entries in it), in order.

        The first span is what is sorted for popping already (from its earliest entry); then one span per
        order bucket starting by ``until_ts``, counted whole (a bucket's entries past ``until_ts`` too, and
        entries dropped but not yet freed). Deferred and held entries are not counted: they wait on time.
        """
        out: list[tuple[float, int]] = []
        head = len(self._head_slots) - self._head_pos + len(self._side)
        if head:
            starts = [self._run_us[self._head_slots[self._head_pos]]] if self._head_pos < len(self._head_slots) else []
            if self._side:
                starts.append(self._side[0][0])
            out.append((min(starts) / 1_000_000, head))
        until_us = _micros_at_or_before(until_ts)
        for bucket in sorted(b for b in self._buckets if b * BUCKET_US <= until_us):
            out.append((bucket * BUCKET_US / 1_000_000, len(self._buckets[bucket])))
        return out

    def requeue(self, entries: Iterable[DueEntry]) -> None:
        """A dispatch attempt failed: queue the entries again, ahead of later work."""
        for entry in entries:
            slot = self._resolve(entry)
            if slot >= 0 and self._state[slot] == _INFLIGHT:
                self._push_side(slot, self._run_us[slot])

    def drop_shards(self, shard_ids: Iterable[int]) -> int:
        """Forget every entry of these shards (lost or re-acquired under a new revision)."""
        dropped = 0
        lost = set()
        for shard_id in shard_ids:
            lost.add(shard_id)
            slot = self._shard_head.get(shard_id, -1)
            while slot >= 0:
                after = self._shard_next[slot]
                self._retire(slot)
                dropped += 1
                slot = after
        # No live entry refers to a fence of these shards any more.
        for key in [key for key in self._fence_index if key[0] in lost]:
            self._fence_free.append(self._fence_index.pop(key))
        if self._dead > self._live:
            self._compact()
        return dropped
