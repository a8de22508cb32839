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

``DueHeap`` is this module's interface; it keeps no object per entry. How entries are laid out
(slots of parallel ``array`` columns, the key index, order buckets, the side and held heaps) and
why is in docs/scheduler.md; the private modules beside this one hold it, each layer using the
one under it: ``_heap_parts`` (the entry, token buckets, constants), ``_heap_slots`` (storage,
key index, shard lists, recently settled keys), ``_heap_order`` (the orders and deferral).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable

from app.scheduler._heap_order import _Order
from app.scheduler._heap_parts import (
    _DEAD,
    _DEFERRED,
    _INFLIGHT,
    _LOW64,
    _QUEUED,
    _RECENT,
    _US,
    BUCKET_US,
    RECENT_S,
    DueEntry,
    TokenBucket,
    _Fifo,
    _micros,
    _micros_at_or_before,
)

__all__ = ["BUCKET_US", "RECENT_S", "DueEntry", "DueHeap", "TokenBucket"]


class DueHeap(_Order):
    """Due entries in dispatch order; the module docstring has the model, docs/scheduler.md the layout."""

    def __init__(self, *, recent_s: float = RECENT_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(recent_s=recent_s, monotonic=monotonic)

    def __len__(self) -> int:
        """Unsettled entries: queued, deferred or being dispatched."""
        return self._live

    @property
    def deferred_count(self) -> int:
        return self._deferred_live

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
                # Live, or settled within recent_s (those settled before are expired above).
                continue
            slot = self._take_slot()
            self._job_hi[slot], self._job_lo[slot], self._run_us[slot] = hi, lo, run_us
            self._index(cell, slot)
            profile = self._profile_of(entry)
            # Against next_run_at, not the epoch: datetimes of one zone subtract fastest.
            run_at = entry.next_run_at
            self._keep_times(slot, run_us, (run_at - entry.nominal_at) // _US, (run_at - entry.due_minute) // _US)
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
        state, settled_in, seq = self._state, self._nominal, batch.seq
        for entry in entries:
            slot = self._resolve(entry)
            if slot >= 0 and state[slot] == _INFLIGHT:
                self._unlink(slot)
                self._live -= 1
                state[slot] = _RECENT
                settled_in[slot] = seq
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
        out.extend(
            (bucket * BUCKET_US / 1_000_000, len(self._buckets[bucket]))
            for bucket in sorted(b for b in self._buckets if b * BUCKET_US <= until_us)
        )
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
