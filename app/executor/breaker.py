"""Per-origin circuit breakers for HTTP targets.

Model: closed (requests flow; consecutive failures are counted) -> open after
``failure_threshold`` consecutive failures (executions for the origin are deferred until
``cooldown_s`` has passed, without spending attempts) -> half-open (one probe request at a
time; success closes, failure re-opens for another cool-down). Time comes from ``clock`` so
tests can drive it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BreakerConfig:
    # Consecutive failures (connection errors, timeouts, 408, 429, 5xx) that open the circuit.
    failure_threshold: int = 5
    # How long an open circuit defers work before a probe is let through.
    cooldown_s: float = 30.0


@dataclass
class _Circuit:
    failures: int = 0
    open_until: float | None = None
    probing: bool = False


@dataclass
class Breakers:
    config: BreakerConfig = field(default_factory=BreakerConfig)
    clock: Callable[[], float] = time.monotonic
    _circuits: dict[str, _Circuit] = field(default_factory=dict)

    def state(self, origin: str) -> str:
        c = self._circuits.get(origin)
        if c is None or c.open_until is None:
            return "closed"
        return "open" if self.clock() < c.open_until or c.probing else "half-open"

    def states(self) -> list[tuple[str, str]]:
        """(origin, state) of every origin with a recent failure (a success forgets an origin)."""
        return [(origin, self.state(origin)) for origin in list(self._circuits)]

    def allow(self, origin: str) -> float | None:
        """None: send now. Otherwise the seconds to defer the execution by."""
        c = self._circuits.get(origin)
        if c is None or c.open_until is None:
            return None
        now = self.clock()
        if now < c.open_until:
            return c.open_until - now
        if c.probing:  # half-open: one probe at a time; the rest wait a little
            return min(self.config.cooldown_s, 1.0)
        c.probing = True
        log.info("circuit half-open: probing", extra={"origin": origin})
        return None

    def record_success(self, origin: str) -> None:
        c = self._circuits.pop(origin, None)
        if c is not None and c.open_until is not None:
            log.info("circuit closed", extra={"origin": origin})

    def record_failure(self, origin: str) -> None:
        c = self._circuits.setdefault(origin, _Circuit())
        c.failures += 1
        if c.probing or (c.open_until is None and c.failures >= self.config.failure_threshold):
            c.open_until = self.clock() + self.config.cooldown_s
            c.probing = False
            log.warning("circuit open", extra={"origin": origin, "failures": c.failures,
                                               "cooldown_s": self.config.cooldown_s})
