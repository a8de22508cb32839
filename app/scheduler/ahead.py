"""How far ahead of their due time the dispatcher turns occurrences into executions.

At least ``min_s`` (``KAIROS_DISPATCH_AHEAD_S``). More when what falls due soon would take longer
than that to dispatch: a span of the heap (``DueHeap.due_counts``) starting at ``start`` is
dispatched from the moment ``start - now <= min_s + queued / rate``, where ``queued`` counts every
entry due by the end of that span and ``rate`` is how fast this process has been dispatching
(entries per second through its busy spells). So a herd's executions are written, and ready at
their due time, before it falls due, however slow the machine, instead of a fixed window running
out at the top of the hour. Never more than ``max_s`` (``KAIROS_DISPATCH_AHEAD_MAX_S``).

Pure arithmetic on what it is given; the dispatcher feeds it the heap's counts and its own spells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Entries per second assumed before a busy spell was measured: low, so a first herd starts early.
PRIOR_RATE_PER_S = 2_000.0
# A spell shorter than this, or of fewer entries, says little about the rate: it is not counted.
MIN_SPELL_S = 0.2
MIN_SPELL_ENTRIES = 1_000
# Weight of the newest spell in the rate (the rest is the spells before it).
SPELL_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class Ahead:
    """The window for now: pop what is due within ``ahead_s``; ask again by ``recheck_ts`` at the latest."""

    ahead_s: float
    recheck_ts: float | None  # when a span not yet started would start (None: none would)


class DispatchRate:
    """Entries per second dispatched while the dispatcher had more due work than it could put in flight."""

    def __init__(self, prior_per_s: float = PRIOR_RATE_PER_S) -> None:
        self.per_s = prior_per_s
        self.measured = False
        self._since: float | None = None
        self._entries = 0

    def popped(self, now: float, entries: int, backlog: bool) -> None:
        """``entries`` were handed to batches; ``backlog``: with every batch slot taken (a spell begins)."""
        if self._since is None:
            if not backlog:
                return
            self._since, self._entries = now, 0
        self._entries += entries

    def idle(self, now: float) -> None:
        """Nothing due waits and no batch is in flight: a spell, if one ran, ends and is counted."""
        if self._since is None:
            return
        elapsed, entries = now - self._since, self._entries
        self._since = None
        if elapsed < MIN_SPELL_S or entries < MIN_SPELL_ENTRIES:
            return
        sample = entries / elapsed
        self.per_s = sample if not self.measured else SPELL_WEIGHT * sample + (1 - SPELL_WEIGHT) * self.per_s
        self.measured = True


@dataclass(frozen=True, slots=True)
class AheadWindow:
    min_s: float
    max_s: float

    def __post_init__(self) -> None:
        if not 0 <= self.min_s <= self.max_s:
            raise ValueError(f"0 <= min_s <= max_s is required, got {self.min_s} and {self.max_s}")

    def plan(self, now_ts: float, spans: Sequence[tuple[float, int]], rate_per_s: float) -> Ahead:
        """The window for ``spans`` (start, entries; in order, as ``DueHeap.due_counts``) at ``rate_per_s``."""
        ahead, recheck, queued = self.min_s, None, 0
        for start, count in spans:
            queued += count
            lead = min(self.max_s, self.min_s + queued / rate_per_s)  # how early this span must start
            if start - now_ts <= lead:
                ahead = max(ahead, lead)
            else:
                recheck = start - lead if recheck is None else min(recheck, start - lead)
        return Ahead(ahead, recheck)
