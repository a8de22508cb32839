"""The parts of the due heap (app/scheduler/heap.py): the entry it hands out, the quotas' token
bucket, and the constants and small structures of its slot layout (docs/scheduler.md).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
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
# A slot's generation is 16 bits: it tells a popped entry's own life in its slot from a later one, and a
# slot in flight is not reused, so only 65,536 reuses while one batch is out could confuse them.
_GEN_MASK = (1 << 16) - 1
_MINUTE_US = 60_000_000
# The nominal column holds nominal_at as its distance before next_run_at, in 32 bits: odd, whole
# seconds (2 * s + 1); even, microseconds (2 * us) up to about 18 minutes; _FAR: kept aside.
_FAR = -(1 << 31)
_HALF31 = 1 << 30
# The narrow columns (profile, fence) widen from 16 to 32 bits when their table outgrows 16 bits.
_NARROW_MAX = (1 << 16) - 1

# Slot states. QUEUED, DEFERRED and INFLIGHT are the live ones (counted in len()).
_FREE = 0
_QUEUED = 1  # in a bucket, the sorted bucket or the side heap
_DEFERRED = 2  # in its tenant's deferred FIFO
_INFLIGHT = 3  # popped, not yet settled, forgotten, requeued or held
_RECENT = 4  # settled; only the key (and its settle batch) is kept
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

    __slots__ = ("at", "rate", "tokens")

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


# Zones that are UTC at every instant. The driver hands out datetimes in the session's zone (timezone.utc
# on Kairos's own connections, app.store.db.SESSION_TIME_ZONE; a caller's may be ZoneInfo("Etc/UTC"));
# subtracting a datetime of another zone costs three times one of the same zone.
_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})
_EPOCHS: dict[tzinfo | None, datetime] = {timezone.utc: _EPOCH}


def _micros(at: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime."""
    epoch = _EPOCHS.get(at.tzinfo)
    if epoch is None:
        zone = at.tzinfo
        if getattr(zone, "key", None) not in _UTC_ZONES:
            return (at - _EPOCH) // _US
        epoch = _EPOCHS[zone] = _EPOCH.replace(tzinfo=zone)
    return (at - epoch) // _US


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

    __slots__ = ("head", "slots")

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
            del self.slots[: self.head]
            self.head = 0
        return slot


class _RecentBatch:
    """Slots settled between ``first_us`` and ``last_us`` (monotonic microseconds); ``seq`` numbers the batch."""

    __slots__ = ("first_us", "last_us", "seq", "slots")

    def __init__(self, now_us: int, seq: int) -> None:
        self.first_us = now_us
        self.last_us = now_us
        self.seq = seq
        self.slots = array("i")
