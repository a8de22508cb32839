"""Token buckets keyed by anything hashable: the submit rate per tenant, failed logins per address.

A bucket holds up to ``capacity`` tokens and refills at ``rate_per_s``; taking costs one token per
unit. A key whose bucket is full keeps no entry (a full bucket and no bucket are the same thing), so
the table holds only keys that spent something recently. Time is a parameter (``now``, seconds on a
monotonic clock): only the callers read the clock.

Hand-written rather than taken from a rate-limit library because the submit path calls it once per
request: two floats per key and no lock or string key is the whole cost (the callers run on one
event loop).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

BUCKETS_MAX_KEYS_DEFAULT = 100_000


@dataclass(frozen=True, slots=True)
class Taken:
    """What ``take`` granted: ``granted`` units (0..wanted), and when none was granted, the seconds
    until one unit's token is back (``retry_after_s``, 0 when something was granted)."""

    granted: int
    retry_after_s: float


class TokenBuckets:
    """One token bucket per key; the capacity and rate are given per call, so a changed quota applies
    at once (a bucket fuller than a lowered capacity is cut down to it)."""

    __slots__ = ("_buckets", "max_keys")

    def __init__(self, max_keys: int = BUCKETS_MAX_KEYS_DEFAULT) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.max_keys = max_keys
        # key -> (tokens at stamp, stamp)
        self._buckets: dict[Hashable, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def tokens(self, key: Hashable, capacity: float, rate_per_s: float, now: float) -> float:
        """The tokens ``key`` holds at ``now``."""
        entry = self._buckets.get(key)
        if entry is None:
            return capacity
        tokens, stamp = entry
        return min(capacity, tokens + max(0.0, now - stamp) * rate_per_s)

    def take(
        self, key: Hashable, wanted: int, capacity: float, rate_per_s: float, now: float, *, partial: bool = True
    ) -> Taken:
        """Take up to ``wanted`` whole tokens (``partial``: as many as there are; otherwise all or none)."""
        if rate_per_s <= 0 or capacity < 1:
            raise ValueError("a bucket needs a positive rate and room for one token")
        tokens = self.tokens(key, capacity, rate_per_s, now)
        granted = min(wanted, math.floor(tokens)) if partial else (wanted if tokens >= wanted else 0)
        if granted:
            self._store(key, tokens - granted, capacity, now)
            return Taken(granted, 0.0)
        return Taken(0, ((1.0 if partial else wanted) - tokens) / rate_per_s)

    def wait_s(self, key: Hashable, capacity: float, rate_per_s: float, now: float) -> float:
        """Seconds until ``key`` holds a whole token again (0: it holds one now)."""
        return max(0.0, (1.0 - self.tokens(key, capacity, rate_per_s, now)) / rate_per_s)

    def give_back(self, key: Hashable, count: int, capacity: float, rate_per_s: float, now: float) -> None:
        """Return ``count`` tokens taken for work that was not done (never above ``capacity``)."""
        if count > 0:
            self._store(key, min(capacity, self.tokens(key, capacity, rate_per_s, now) + count), capacity, now)

    def spend(self, key: Hashable, capacity: float, rate_per_s: float, now: float) -> float:
        """Take one token whether or not there is one (the bucket may go below zero: a failed login
        costs a token even when it is over the limit); the tokens left."""
        left = self.tokens(key, capacity, rate_per_s, now) - 1.0
        self._store(key, left, capacity, now)
        return left

    def _store(self, key: Hashable, tokens: float, capacity: float, now: float) -> None:
        if tokens >= capacity:
            self._buckets.pop(key, None)
            return
        # Re-inserted, so the table stays in order of last use, oldest first.
        if self._buckets.pop(key, None) is None and len(self._buckets) >= self.max_keys:
            self._evict()
        self._buckets[key] = (tokens, now)

    def _evict(self) -> None:
        """Make room: drop the tenth of the buckets used longest ago."""
        for key in list(self._buckets)[: max(1, self.max_keys // 10)]:
            del self._buckets[key]
