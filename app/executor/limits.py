"""How many requests one (tenant, origin) circuit may have in flight: a limit that adapts to the origin.

A fixed per-origin cap is either too small for a healthy origin (a herd of webhooks to one fast receiver
waits behind it) or too large for a struggling one. ``AdaptiveLimit`` is an AIMD controller in the spirit of
TCP congestion control and Envoy's adaptive concurrency filter, driven by what each answer says:

- It starts at ``start`` and moves between ``floor`` and ``ceiling`` once per *window*: every
  ``max(4, limit / 4)`` answers, or ``window_s`` when answers are few.
- Growth, only while the limit is what holds requests back (in flight reached ``limit`` during the window;
  an origin that is sent little keeps its limit): doubling per window until the first sign of congestion
  (slow start), then ``sqrt(limit)`` per window.
- Congestion, halving (at most once a window): a timeout, a connection error, 429 or 503. A ``Retry-After``
  on 429 or 503 also pauses the circuit: nothing is sent to it until that time (``paused_for``).
- Latency, x0.9: a window whose mean latency is over ``tolerance`` x the origin's baseline (a slow moving
  average of earlier windows' means, so a receiver that is merely busier for a long time becomes the new
  normal rather than a reason to shrink for ever).

An origin idle for ``idle_reset_s`` starts a new slow start from the limit it had (at least ``start``): what
it learned in one herd serves the next, and an origin that recovered meanwhile is not held to its old low.
Time comes from ``clock`` so tests can drive it. Limits are per executor process: each executor learns the
origin on its own, so an installation with N executors may send up to N x ``ceiling`` to one origin.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

LATENCY_TOLERANCE_DEFAULT = 3.0
WINDOW_S_DEFAULT = 0.5
IDLE_RESET_S_DEFAULT = 60.0
BASELINE_WEIGHT = 0.05  # how much one window moves the latency baseline


@dataclass
class AdaptiveLimit:
    start: int
    ceiling: int
    floor: int = 1
    tolerance: float = LATENCY_TOLERANCE_DEFAULT
    window_s: float = WINDOW_S_DEFAULT
    idle_reset_s: float = IDLE_RESET_S_DEFAULT
    clock: Callable[[], float] = time.monotonic
    limit: float = field(init=False)
    slow_start: bool = field(init=False, default=True)
    baseline_s: float | None = field(init=False, default=None)
    paused_until: float = field(init=False, default=0.0)
    _answers: int = field(init=False, default=0)
    _latency_sum: float = field(init=False, default=0.0)
    _peak: int = field(init=False, default=0)
    _congested: bool = field(init=False, default=False)
    _window_began: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.ceiling or self.tolerance <= 1 or self.window_s <= 0:
            raise ValueError("1 <= floor <= ceiling, tolerance > 1 and window_s > 0")
        self.limit = float(min(max(self.start, self.floor), self.ceiling))
        self._window_began = self.clock()

    @property
    def current(self) -> int:
        return int(self.limit)

    def paused_for(self) -> float | None:
        """Seconds the origin asked us to wait (Retry-After) that are left; None when requests may go."""
        left = self.paused_until - self.clock()
        return left if left > 0 else None

    def sending(self, in_flight: int) -> None:
        """A request leaves; ``in_flight`` counts it. After ``idle_reset_s`` with nothing sent the origin may
        have changed: the limit restarts its slow start from where it was (never below ``start``)."""
        now = self.clock()
        if in_flight <= 1 and now - self._window_began > self.idle_reset_s:
            self.slow_start = True
            self.limit = max(self.limit, float(min(self.start, self.ceiling)))
            self._answers, self._latency_sum, self._peak, self._congested = 0, 0.0, 0, False
            self._window_began = now
        self._peak = max(self._peak, in_flight)

    def succeeded(self, latency_s: float) -> None:
        self._answers += 1
        self._latency_sum += latency_s
        self._maybe_close()

    def congested(self, latency_s: float, retry_after_s: float | None = None) -> None:
        """A timeout, a connection error, 429 or 503 (with the answer's Retry-After, if any)."""
        self._answers += 1
        self._latency_sum += latency_s
        if retry_after_s is not None and retry_after_s > 0:
            self.paused_until = max(self.paused_until, self.clock() + retry_after_s)
        if not self._congested:  # halve at once, not at the window's end: the origin is saying so now
            self._congested = True
            self.slow_start = False
            self.limit = max(float(self.floor), self.limit / 2)
        self._maybe_close()

    def _maybe_close(self) -> None:
        now = self.clock()
        if self._answers < max(4, self.limit / 4) and now - self._window_began < self.window_s:
            return
        mean = self._latency_sum / self._answers
        binding = self._peak >= self.current
        if self._congested:
            pass  # halved already
        elif self.baseline_s is not None and mean > self.tolerance * self.baseline_s:
            self.slow_start = False
            self.limit = max(float(self.floor), self.limit * 0.9)
        elif binding:
            grow = self.limit if self.slow_start else math.sqrt(self.limit)
            self.limit = min(float(self.ceiling), self.limit + max(1.0, grow))
        self.baseline_s = (
            mean if self.baseline_s is None else ((1 - BASELINE_WEIGHT) * self.baseline_s + BASELINE_WEIGHT * mean)
        )
        self._answers, self._latency_sum, self._peak, self._congested = 0, 0.0, 0, False
        self._window_began = now
