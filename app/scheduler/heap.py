"""The in-memory min-heap of due_index entries of the shards this process owns.

Ordering: by run time; entries due at the same instant are interleaved across tenants
(round-robin, weighted by tenant weight: the k-th entry of a tenant at instant T sorts at rank
k / weight), so a tenant with 100,000 jobs at midnight does not push another tenant's few to
the back. A per-tenant token bucket (tenants.max_dispatch_per_s, burst of one second) defers the
excess of a tenant over its quota: deferred entries keep their order and go first as soon as the
tenant has tokens again, while other tenants pass.

Every entry is known by its key (job_id, next_run_at) until it is settled: the loader's repeated
scans cannot add it twice, and an entry settled a moment ago is ignored for ``recent_s`` (a scan
that read the row just before its dispatch committed would otherwise bring it back). Entries of
lost shards are dropped: eagerly from the index, lazily from the heap itself.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

# How long a settled key is remembered, so a stale scan cannot resurrect it.
RECENT_S = 120.0


@dataclass(frozen=True, slots=True)
class DueEntry:
    """One due_index row as loaded, plus the shard revision it was loaded under (its fence)."""

    shard_id: int
    revision: int
    due_minute: datetime
    next_run_at: datetime
    job_id: UUID
    tenant_id: UUID
    nominal_at: datetime
    weight: int = 1
    max_dispatch_per_s: int = 5000

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


class DueHeap:
    def __init__(self, *, recent_s: float = RECENT_S, monotonic=time.monotonic) -> None:
        self._heap: list[tuple[float, float, int, DueEntry]] = []
        self._seq = itertools.count()
        self._entries: dict[tuple[UUID, datetime], DueEntry] = {}  # every unsettled entry
        self._by_shard: dict[int, set[tuple[UUID, datetime]]] = {}
        self._rank: dict[tuple[float, UUID], int] = {}
        self._deferred: dict[UUID, deque[DueEntry]] = {}
        self._buckets: dict[UUID, TokenBucket] = {}
        self._recent: dict[tuple[UUID, datetime], float] = {}
        self._recent_s = recent_s
        self._monotonic = monotonic
        self._adds = 0

    def __len__(self) -> int:
        """Unsettled entries: queued, deferred or being dispatched."""
        return len(self._entries)

    @property
    def deferred_count(self) -> int:
        return sum(len(d) for d in self._deferred.values())

    def add(self, entries: Iterable[DueEntry]) -> int:
        """Queue entries not already known; returns how many were new."""
        added = 0
        now_m = self._monotonic()
        for entry in entries:
            key = entry.key
            if key in self._entries:
                continue
            seen = self._recent.get(key)
            if seen is not None and now_m - seen < self._recent_s:
                continue
            ts = entry.run_ts
            rank_key = (ts, entry.tenant_id)
            k = self._rank.get(rank_key, 0)
            self._rank[rank_key] = k + 1
            heapq.heappush(self._heap, (ts, k / max(1, entry.weight), next(self._seq), entry))
            self._entries[key] = entry
            self._by_shard.setdefault(entry.shard_id, set()).add(key)
            added += 1
        self._adds += 1
        if self._adds % 64 == 0:
            self._prune(now_m)
        return added

    def _prune(self, now_m: float) -> None:
        self._recent = {k: t for k, t in self._recent.items() if now_m - t < self._recent_s}
        if self._heap:
            horizon = self._heap[0][0]
            self._rank = {k: v for k, v in self._rank.items() if k[0] >= horizon}
        else:
            self._rank.clear()

    def _live(self, entry: DueEntry) -> bool:
        return self._entries.get(entry.key) is entry

    def _bucket(self, entry: DueEntry, now_ts: float) -> TokenBucket:
        bucket = self._buckets.get(entry.tenant_id)
        if bucket is None:
            bucket = self._buckets[entry.tenant_id] = TokenBucket(entry.max_dispatch_per_s, now_ts)
        elif bucket.rate != entry.max_dispatch_per_s:
            bucket.refill(now_ts)
            bucket.rate = float(entry.max_dispatch_per_s)
            bucket.tokens = min(bucket.tokens, bucket.rate)
        return bucket

    def pop_due(self, now_ts: float, limit: int) -> list[DueEntry]:
        """Up to ``limit`` entries due at ``now_ts`` that their tenants' quotas allow, fairly ordered.

        Popped entries stay known (in flight) until ``settle`` or ``requeue``.
        """
        out: list[DueEntry] = []
        # Deferred entries are older than anything in the heap: they go first, round-robin.
        while self._deferred and len(out) < limit:
            progressed = False
            for tenant_id in list(self._deferred):
                queue = self._deferred[tenant_id]
                while queue and not self._live(queue[0]):
                    queue.popleft()
                if not queue:
                    del self._deferred[tenant_id]
                    continue
                if len(out) < limit and self._bucket(queue[0], now_ts).take(now_ts):
                    out.append(queue.popleft())
                    progressed = True
                    if not queue:
                        del self._deferred[tenant_id]
            if not progressed:
                break
        heap = self._heap
        while heap and len(out) < limit and heap[0][0] <= now_ts:
            entry = heapq.heappop(heap)[3]
            if not self._live(entry):
                continue
            waiting = self._deferred.get(entry.tenant_id)
            if waiting is None and self._bucket(entry, now_ts).take(now_ts):
                out.append(entry)
            else:
                self._deferred.setdefault(entry.tenant_id, deque()).append(entry)
        return out

    def next_wake_ts(self) -> float | None:
        """When pop_due may next return something: the heap head, or a deferred tenant's next token."""
        candidates = []
        while self._heap and not self._live(self._heap[0][3]):
            heapq.heappop(self._heap)
        if self._heap:
            candidates.append(self._heap[0][0])
        for tenant_id, queue in self._deferred.items():
            bucket = self._buckets.get(tenant_id)
            if queue and bucket is not None:
                candidates.append(bucket.next_token_ts())
        return min(candidates) if candidates else None

    def settle(self, entries: Iterable[DueEntry]) -> None:
        """The entries' rows were dispatched (or had vanished): forget them, ignoring stale reloads."""
        now_m = self._monotonic()
        for entry in entries:
            key = entry.key
            if self._entries.get(key) is entry:
                del self._entries[key]
                keys = self._by_shard.get(entry.shard_id)
                if keys is not None:
                    keys.discard(key)
            self._recent[key] = now_m

    def forget(self, entries: Iterable[DueEntry]) -> None:
        """Drop entries without remembering them (fenced: whoever owns the shard now reloads them)."""
        for entry in entries:
            key = entry.key
            if self._entries.get(key) is entry:
                del self._entries[key]
                keys = self._by_shard.get(entry.shard_id)
                if keys is not None:
                    keys.discard(key)

    def hold(self, entries: Iterable[DueEntry], ahead_s: float) -> None:
        """Queue popped entries again so that a pop ``ahead_s`` early finds them only when they are due."""
        for entry in entries:
            if self._live(entry):
                heapq.heappush(self._heap, (entry.run_ts + ahead_s, -1.0, next(self._seq), entry))

    def requeue(self, entries: Iterable[DueEntry]) -> None:
        """A dispatch attempt failed: queue the entries again, ahead of later work."""
        for entry in entries:
            if self._live(entry):
                heapq.heappush(self._heap, (entry.run_ts, -1.0, next(self._seq), entry))

    def drop_shards(self, shard_ids: Iterable[int]) -> int:
        """Forget every entry of these shards (lost or re-acquired under a new revision)."""
        dropped = 0
        for shard_id in shard_ids:
            for key in self._by_shard.pop(shard_id, ()):
                if self._entries.pop(key, None) is not None:
                    dropped += 1
        if dropped and len(self._heap) > 4 * max(1, len(self._entries)):
            self._heap = [item for item in self._heap if self._live(item[3])]
            heapq.heapify(self._heap)
        return dropped

