"""The due heap's storage (app/scheduler/heap.py; the layout is in docs/scheduler.md): entries in
slots of parallel ``array`` columns, the key index over them, the small tables the columns point
into, each shard's list of its entries, and the memory of recently settled keys.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Callable
from uuid import UUID

from app.scheduler._heap_parts import (
    _EMPTY,
    _FAR,
    _FREE,
    _GEN_MASK,
    _HALF31,
    _INFLIGHT,
    _LOW64,
    _MINUTE_US,
    _NARROW_MAX,
    _QUEUED,
    _RECENT,
    _TOMBSTONE,
    GROW_SLOTS,
    MIN_TABLE,
    RECENT_BATCH_US,
    RECENT_S,
    DueEntry,
    _micros,
    _RecentBatch,
)


class _Slots:
    """Slots, the key index, the small tables, shard lists and recently settled keys."""

    def __init__(self, *, recent_s: float = RECENT_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._recent_us = round(recent_s * 1_000_000)
        self._monotonic = monotonic
        # Columns, indexed by slot.
        self._job_hi = array("Q")
        self._job_lo = array("Q")
        self._run_us = array("q")
        # nominal_at before next_run_at, encoded (_nominal_code); a RECENT slot keeps its settle batch's number here.
        self._nominal = array("i")
        self._profile = array("H")  # widens to "I" past 65,535 profiles
        self._fence = array("H")  # widens to "I" past 65,535 fences
        self._state = bytearray()
        self._generation = array("H")
        self._shard_next = array("i")
        self._shard_prev = array("i")
        self._free = array("i")
        # The few entries a column cannot hold: due_minute other than next_run_at's minute, and
        # nominal_at too far from next_run_at for the nominal column (a misfire's catch-up), by slot.
        self._odd_due: dict[int, int] = {}
        self._far_nominal: dict[int, int] = {}
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
        self._recent: deque[_RecentBatch] = deque()
        self._recent_seq = 0

    # ------------------------------------------------------------------------------------------
    # Slots and the key index
    # ------------------------------------------------------------------------------------------

    def _grow(self) -> None:
        start = len(self._state)
        for column in (
            self._job_hi,
            self._job_lo,
            self._run_us,
            self._nominal,
            self._profile,
            self._fence,
            self._generation,
            self._shard_next,
            self._shard_prev,
        ):
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
        if self._odd_due:
            self._odd_due.pop(slot, None)
        if self._far_nominal:
            self._far_nominal.pop(slot, None)

    def _keep_times(self, slot: int, run_us: int, lag: int, due_lag: int) -> None:
        """Store a live slot's nominal_at and due_minute, given as microseconds before its run time ``run_us``."""
        if lag == 0:
            self._nominal[slot] = 1
        else:
            seconds, rest = divmod(lag, 1_000_000)
            if rest == 0 and -_HALF31 <= seconds < _HALF31:
                self._nominal[slot] = 2 * seconds + 1
            elif -_HALF31 < lag < _HALF31:
                self._nominal[slot] = 2 * lag
            else:
                self._nominal[slot] = _FAR
                self._far_nominal[slot] = run_us - lag
        if due_lag != run_us % _MINUTE_US:
            self._odd_due[slot] = run_us - due_lag

    def _nominal_us(self, slot: int, run_us: int) -> int:
        code = self._nominal[slot]
        if code & 1:
            return run_us - (code >> 1) * 1_000_000
        if code == _FAR:
            return self._far_nominal[slot]
        return run_us - (code >> 1)

    def _due_us(self, slot: int, run_us: int) -> int:
        if self._odd_due:
            due_us = self._odd_due.get(slot)
            if due_us is not None:
                return due_us
        return run_us - run_us % _MINUTE_US

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
            self._widen_profiles()
        return profile

    def _widen_profiles(self) -> None:
        if len(self._profile_tenant) > _NARROW_MAX and self._profile.typecode == "H":
            self._profile = array("I", self._profile)

    def _widen_fences(self) -> None:
        if len(self._fence_shard) > _NARROW_MAX and self._fence.typecode == "H":
            self._fence = array("I", self._fence)

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
                self._widen_fences()
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
    # Recently settled keys
    # ------------------------------------------------------------------------------------------

    def _now_us(self) -> int:
        return round(self._monotonic() * 1_000_000)

    def _recent_batch(self, now_us: int) -> _RecentBatch:
        """The settle batch that slots settled at ``now_us`` join."""
        if not self._recent or now_us - self._recent[-1].first_us >= RECENT_BATCH_US:
            self._recent_seq = (self._recent_seq + 1) & 0x7FFFFFFF
            self._recent.append(_RecentBatch(now_us, self._recent_seq))
        batch = self._recent[-1]
        batch.last_us = max(batch.last_us, now_us)
        return batch

    def _note_recent(self, slot: int, now_us: int) -> None:
        self._state[slot] = _RECENT
        batch = self._recent_batch(now_us)
        self._nominal[slot] = batch.seq
        batch.slots.append(slot)

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
        state, settled_in = self._state, self._nominal
        while self._recent and self._recent[0].last_us <= horizon:
            batch = self._recent.popleft()
            seq = batch.seq
            for slot in batch.slots:
                # Skip slots settled again later (a later batch has them) or reused since.
                if state[slot] == _RECENT and settled_in[slot] == seq:
                    self._unindex(slot)
                    self._release_slot(slot)
