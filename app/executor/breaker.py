"""Circuit breakers for HTTP targets, one per (tenant, origin): one tenant's failing endpoint never
opens the circuit another tenant's deliveries to the same origin go through.

Model: closed (requests flow; consecutive failures are counted) -> open after
``failure_threshold`` consecutive failures (nothing is sent; executions for the circuit are
deferred until ``cooldown_s`` has passed, without spending attempts) -> half-open (one probe
request; success closes, failure re-opens for another cool-down).

A circuit that has started failing narrows before it opens: with ``f`` consecutive failures it lets
at most ``failure_threshold - f`` requests be in flight (at least one), so the requests that
confirm an outage are about the ones already in flight when it began, not every delivery leased
meanwhile. ``limit`` says how many may be in flight, ``open_for`` how long an open circuit still
defers; the pool calls ``sending`` when a request leaves. Time comes from ``clock`` so tests can
drive it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# (tenant, origin): whose deliveries (the tenant id as leased, text) to which scheme://host:port.
Key = tuple[str, str]


@dataclass(frozen=True)
class BreakerConfig:
    # Consecutive failures (connection errors, timeouts, unresolvable names, 408, 429, 5xx) that open the circuit.
    failure_threshold: int = 5
    # How long an open circuit defers work before a probe is let through.
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1 or self.cooldown_s <= 0:
            raise ValueError("failure_threshold >= 1 and cooldown_s > 0")


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
        return "open" if self.clock() < c.open_until else "half-open"

    def states(self) -> list[tuple[Key, str]]:
        """((tenant, origin), state) of every circuit with a recent failure (a success forgets it)."""
        return [(key, self.state(key)) for key in list(self._circuits)]

    def open_for(self, key: Key) -> float | None:
        """Seconds an open circuit still defers its executions; None when requests may be sent."""
        c = self._circuits.get(key)
        if c is None or c.open_until is None:
            return None
        left = c.open_until - self.clock()
        return left if left > 0 else None

    def limit(self, key: Key, most: int) -> int:
        """How many requests of the circuit may be in flight (``most`` while it is healthy)."""
        c = self._circuits.get(key)
        if c is None:
            return most
        if c.open_until is not None:
            return 0 if self.clock() < c.open_until else 1  # half-open: the probe alone
        return max(1, min(most, self.config.failure_threshold - c.failures))

    def sending(self, key: Key) -> None:
        """A request of the circuit leaves now (after ``limit`` allowed it): the probe, when half-open."""
        c = self._circuits.get(key)
        if c is not None and c.open_until is not None and not c.probing and self.clock() >= c.open_until:
            c.probing = True
            log.info("circuit half-open: probing", extra={"tenant_id": str(key[0]), "origin": key[1]})

    def record_success(self, key: Key) -> None:
        c = self._circuits.pop(key, None)
        if c is not None and c.open_until is not None:
            log.info("circuit closed", extra={"tenant_id": str(key[0]), "origin": key[1]})

    def record_failure(self, key: Key) -> bool:
        """Count a failure; True when it opened (or re-opened) the circuit."""
        c = self._circuits.setdefault(key, _Circuit())
        c.failures += 1
        if c.probing or (c.open_until is None and c.failures >= self.config.failure_threshold):
            c.open_until = self.clock() + self.config.cooldown_s
            c.probing = False
            log.warning(
                "circuit open",
                extra={
                    "tenant_id": str(key[0]),
                    "origin": key[1],
                    "failures": c.failures,
                    "cooldown_s": self.config.cooldown_s,
                },
            )
            return True
        return False

    def abandon(self, key: Key) -> None:
        """A request that left nothing to judge the origin by (refused before sending): another may probe."""
        c = self._circuits.get(key)
        if c is not None:
            c.probing = False
