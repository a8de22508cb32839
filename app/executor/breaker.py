"""Circuit breakers for HTTP targets, one per (tenant, origin): one tenant's failing endpoint never
opens the circuit another tenant's deliveries to the same origin go through.

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
from uuid import UUID

log = logging.getLogger(__name__)

# (tenant, origin): whose deliveries to which scheme://host:port.
Key = tuple[UUID, str]


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
    _circuits: dict[Key, _Circuit] = field(default_factory=dict)

    def state(self, key: Key) -> str:
        c = self._circuits.get(key)
        if c is None or c.open_until is None:
            return "closed"
        return "open" if self.clock() < c.open_until or c.probing else "half-open"

    def states(self) -> list[tuple[Key, str]]:
        """((tenant, origin), state) of every circuit with a recent failure (a success forgets it)."""
        return [(key, self.state(key)) for key in list(self._circuits)]

    def allow(self, key: Key) -> float | None:
        """None: send now. Otherwise the seconds to defer the execution by."""
        c = self._circuits.get(key)
        if c is None or c.open_until is None:
            return None
        now = self.clock()
        if now < c.open_until:
            return c.open_until - now
        if c.probing:  # half-open: one probe at a time; the rest wait a little
            return min(self.config.cooldown_s, 1.0)
        c.probing = True
        log.info("circuit half-open: probing", extra={"tenant_id": str(key[0]), "origin": key[1]})
        return None

    def record_success(self, key: Key) -> None:
        c = self._circuits.pop(key, None)
        if c is not None and c.open_until is not None:
            log.info("circuit closed", extra={"tenant_id": str(key[0]), "origin": key[1]})

    def record_failure(self, key: Key) -> None:
        c = self._circuits.setdefault(key, _Circuit())
        c.failures += 1
        if c.probing or (c.open_until is None and c.failures >= self.config.failure_threshold):
            c.open_until = self.clock() + self.config.cooldown_s
            c.probing = False
            log.warning("circuit open", extra={"tenant_id": str(key[0]), "origin": key[1],
                                               "failures": c.failures,
                                               "cooldown_s": self.config.cooldown_s})
