"""The built-in pool for http targets (queue '@http'), consumed by the executor itself.

Each leased execution is sent to its target URL, signed, with its idempotency key (``app.executor.http_request``
says what is sent, ``app.executor.http_send`` how). The pool decides when: it leases as slots free (with
nothing ready, until the queue's next ready time), keeps at most ``concurrency`` requests in flight, at most
``per_tenant`` of one tenant and an adaptive number of one (tenant, origin) circuit (``app.executor.limits``);
a leased delivery that cannot start yet waits here holding no slot, and a tenant with as many waiting as its
busiest origin may have in flight is not leased more, so its backlog stays in the queue. A per-circuit
breaker (``app.executor.breaker``) defers the deliveries of an open circuit, attempt refunded, and so the
requests that fail once it is open. Leases last ``lease_s`` and are renewed while a delivery runs or waits.
The attempt starts when its request is sent (``sent_at``). The model, its defaults and how to tune them:
docs/http-delivery.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

from app import observability
from app.domain.egress import IPAddress
from app.domain.queues import HTTP_QUEUE
from app.duties import pause
from app.executor._http_attempt import TARGETS_CACHED_MAX, Attempts, Held
from app.executor.batching import Coalescer, Outcomes
from app.executor.breaker import Breakers, Key
from app.executor.delivery_egress import EgressPolicy
from app.executor.http_client import HttpClient
from app.executor.http_config import HttpPoolConfig
from app.executor.http_request import (
    Target,
    Verdict,
    origin,
)
from app.executor.http_send import Sender
from app.executor.limits import AdaptiveLimit
from app.executor.payloads import resolve_leased
from app.store import Database
from app.store import executions as ex
from app.store.payloads import PayloadStore

log = logging.getLogger(__name__)

# How soon an idle pool looks again when work is ready that its last lease could not take.
READY_RECHECK_S = 0.02
READY_RECHECK_SKIPPED_S = 0.1


class HttpPool(Attempts):
    def __init__(
        self,
        db: Database,
        outcomes: Outcomes,
        config: HttpPoolConfig | None = None,
        *,
        egress: EgressPolicy = EgressPolicy(),
        breakers: Breakers | None = None,
        transport: Sender | None = None,
        payloads: PayloadStore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        config = config or HttpPoolConfig()
        self.db = db
        self.payloads = payloads  # reads the payloads kept in the object store (app.executor.payloads)
        self.outcomes = outcomes
        self.config = config
        self.egress = egress
        self.breakers = breakers or Breakers(config.breaker)
        self.send: Sender = transport or HttpClient(config.error_body_bytes, idle_max=config.concurrency)
        self.clock = clock
        self.wake = asyncio.Event()
        self._held: dict[str, Held] = {}  # by execution id
        self._waiting: dict[Key, deque[Held]] = {}
        self._waiting_by_tenant: Counter[str] = Counter()
        self._sending = 0
        self._sending_by_key: Counter[Key] = Counter()
        self._sending_by_tenant: Counter[str] = Counter()
        self._limits: dict[Key, AdaptiveLimit] = {}
        self._targets: dict[tuple[str, str], Target | Verdict] = {}
        self._literals: dict[tuple[str, int], IPAddress] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._more = asyncio.Event()  # room to lease again (see _lease_loop)
        self._want_room = False  # the last lease stopped for lack of room
        self._skipped: list[str] = []  # tenants the last lease left out (deliveries waiting here)
        self._released = asyncio.Event()  # a held delivery was let go (run_once waits on it)
        self._restarter: Coalescer[Held, bool] = Coalescer("http-restart", self._restart_flush)

    @property
    def inflight(self) -> int:
        """Requests in flight (each holds a slot)."""
        return self._sending

    @property
    def held(self) -> int:
        """Deliveries leased by this pool and not settled yet (in flight or waiting for a slot)."""
        return len(self._held)

    def waiting_by_tenant(self) -> Counter[str]:
        return +self._waiting_by_tenant

    def limit_of(self, key: Key) -> int:
        """The circuit's adaptive limit of requests in flight now."""
        found = self._limits.get(key)
        return found.current if found is not None else min(self.config.per_origin_start, self.config.per_origin)

    # -- leasing and slots -------------------------------------------------------------------------

    def _buffer(self, tenant: str) -> int:
        """Deliveries a tenant may have waiting here before it is leased no more: about one more round of
        what its busiest origin may have in flight."""
        most = max((self.limit_of(k) for k in self._waiting if k[0] == tenant), default=0)
        return max(8, min(most, self.config.tenant_slots))

    def _room(self) -> int:
        """Deliveries this pool could start: free slots less what already waits for them. Deliveries of a
        tenant left out of leasing, or at its own limit, wait for that tenant's slots, not for these."""
        skipped, most = set(self._skipped), self.config.tenant_slots
        waiting = sum(
            n for t, n in self._waiting_by_tenant.items() if t not in skipped and self._sending_by_tenant[t] < most
        )
        return self.config.concurrency - self._sending - waiting

    async def lease_batch(self) -> list[ex.Leased]:
        """Lease what fits in the free room, then start or queue each delivery."""
        self._skipped = [t for t, n in self._waiting_by_tenant.items() if n >= self._buffer(t)]
        room = self._room()
        if room <= 0:
            self._want_room = True
            return []
        limit = min(room, self.config.batch)
        # One deadline for the whole exchange, connecting to the last byte read (the sender keeps it).
        began = self.clock()
        got = await self.db.statement(
            lambda tx: tx.executions.lease(
                HTTP_QUEUE, self.config.worker_id, limit, self.config.lease_s, skip_tenants=self._skipped
            )
        )
        self._want_room = len(got) >= limit
        if got:
            observability.leased.add(len(got), {"queue": observability.queue_kind(HTTP_QUEUE)})
            self.outcomes.track(got, self.config.lease_s, HTTP_QUEUE, started=False)
        for item in got:
            target = self._target(item)
            entry = Held(item, None if isinstance(target, Verdict) else target, began + item.timeout_s, leased_at=began)
            self._held[item.execution_id] = entry
            if isinstance(target, Verdict):
                self._spawn(self._settle(entry, target), item)
            else:
                self._admit(entry)
        return got

    def _target(self, item: ex.Leased) -> Target | Verdict:
        """``_origin``, parsed once per (tenant, URL): a herd's deliveries share a handful of URLs."""
        cache_key = (item.tenant_id, item.target_ref)
        found = self._targets.get(cache_key)
        if found is None:
            if len(self._targets) >= TARGETS_CACHED_MAX:
                self._targets.clear()
            found = self._targets[cache_key] = origin(item)
        return found

    def _can_start(self, key: Key) -> bool:
        return (
            self._sending < self.config.concurrency
            and self._sending_by_key[key] < min(self.breakers.limit(key, self.config.per_origin), self.limit_of(key))
            and self._sending_by_tenant[key[0]] < self.config.tenant_slots
        )

    def _held_back_for(self, key: Key) -> float | None:
        """Seconds the circuit sends nothing: its breaker is open, or its origin asked (Retry-After)."""
        left = self.breakers.open_for(key)
        limit = self._limits.get(key)
        paused = limit.paused_for() if limit is not None else None
        if left is None:
            return paused
        return left if paused is None else max(left, paused)

    def _admit(self, entry: Held) -> None:
        """Start a delivery now, defer it (its circuit sends nothing for a while) or queue it for a slot."""
        assert entry.key is not None
        if (left := self._held_back_for(entry.key)) is not None:
            self._defer(entry, left)
        elif self._waiting.get(entry.key) is None and self._can_start(entry.key):
            self._start(entry)
        else:
            entry.waiting = True
            self._waiting.setdefault(entry.key, deque()).append(entry)
            self._waiting_by_tenant[entry.key[0]] += 1

    def _unwait(self, entry: Held) -> None:
        assert entry.key is not None
        entry.waiting = False
        tenant = entry.key[0]
        self._waiting_by_tenant[tenant] -= 1
        if self._waiting_by_tenant[tenant] <= 0:
            del self._waiting_by_tenant[tenant]

    def _pump(self) -> None:
        """Give free slots to waiting deliveries, circuit by circuit; defer those of circuits held back."""
        for key in list(self._waiting):
            queue = self._waiting[key]
            if (left := self._held_back_for(key)) is not None:
                while queue:
                    entry = queue.popleft()
                    self._unwait(entry)
                    self._defer(entry, left)
            while queue and self._can_start(key):
                entry = queue.popleft()
                self._unwait(entry)
                self._start(entry, waited=True)
            if not queue:
                del self._waiting[key]
            else:  # the circuit keeps its place behind the others: slots go round
                self._waiting[key] = self._waiting.pop(key)
        self._maybe_more()

    def _maybe_more(self) -> None:
        """Wake the lease loop when a lease would now find room, or a tenant it left out has drained."""
        if self._more.is_set():
            return
        room = self._want_room and self._room() >= self.config.refill_at
        drained = self._skipped and any(self._waiting_by_tenant[t] * 2 < self._buffer(t) for t in self._skipped)
        if room or drained:
            self._more.set()

    def _start(self, entry: Held, *, waited: bool = False) -> None:
        assert entry.key is not None
        entry.sending = True
        self._sending += 1
        self._sending_by_key[entry.key] += 1
        self._sending_by_tenant[entry.key[0]] += 1
        self.breakers.sending(entry.key)
        self._limit(entry.key).sending(self._sending_by_key[entry.key])
        restart = waited and self.clock() - entry.leased_at > self.config.restart_after_s
        self._spawn(self._deliver(entry, restart=restart), entry.item)

    def _free_slot(self, entry: Held) -> None:
        if not entry.sending:
            return
        assert entry.key is not None
        entry.sending = False
        self._sending -= 1
        self._sending_by_key[entry.key] -= 1
        self._sending_by_tenant[entry.key[0]] -= 1
        if self._sending_by_key[entry.key] <= 0:
            del self._sending_by_key[entry.key]
        if self._sending_by_tenant[entry.key[0]] <= 0:
            del self._sending_by_tenant[entry.key[0]]

    def _defer(self, entry: Held, delay_s: float) -> None:
        self._spawn(self._settle(entry, Verdict("deferred", f"{delay_s:.3f}")), entry.item)

    def _spawn(self, work: Coroutine[Any, Any, None], item: ex.Leased) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery crashed", exc_info=task.exception())

    def _let_go(self, entry: Held) -> None:
        """The delivery is settled (or lost): free its slot, forget it, hand its slot on."""
        self._free_slot(entry)
        if self._held.get(entry.item.execution_id) is entry:
            del self._held[entry.item.execution_id]
        self._released.set()
        self._pump()

    def _forget_idle_limits(self) -> None:
        """Past TARGETS_CACHED_MAX circuits, drop the limits of those with nothing in flight or waiting and no
        pause left (bounded memory); below it, a circuit keeps what it learned for its next herd."""
        if len(self._limits) <= TARGETS_CACHED_MAX:
            return
        for key in [
            k
            for k, lim in self._limits.items()
            if k not in self._sending_by_key and k not in self._waiting and lim.paused_for() is None
        ]:
            del self._limits[key]

    # -- the loops -----------------------------------------------------------------------------------

    async def run_once(self) -> list[ex.Leased]:
        """Lease one batch and wait until every delivery of it has an outcome (tests, benchmarks)."""
        got = await self.lease_batch()
        ids = {item.execution_id for item in got}
        while ids & self._held.keys():
            self._released.clear()
            await self._released.wait()
        return got

    async def run(self, stop: asyncio.Event) -> None:
        for entry, why in await self._allow_list_warnings():
            log.warning("egress allow-list entry matches nothing plausible", extra={"entry": entry, "why": why})
        renewer = asyncio.create_task(self._renew_loop(stop), name="http-lease-renewer")
        try:
            await self._lease_loop(stop)
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _allow_list_warnings(self) -> list[tuple[str, str]]:
        from app.executor.delivery_egress import allow_list_warnings

        try:
            return await allow_list_warnings(self.egress)
        except Exception:
            log.exception("could not check the egress allow list")
            return []

    async def _lease_loop(self, stop: asyncio.Event) -> None:
        # Not app.duties.run_every: a lease that found work goes round at once while there is room, one
        # stopped by room sleeps until _maybe_more says a lease would find some, and one that found nothing
        # sleeps until the queue's next ready time (at most poll_interval_s) or a wake-up.
        while not stop.is_set():
            self._more.clear()
            try:
                got = await self.lease_batch()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("http pool lease failed")
                await pause(self.config.poll_interval_s, stop)
                continue
            if got and self._room() > 0:
                continue  # there may be more ready right now (the fair lease caps each tenant's share of a batch)
            if self._want_room:
                await pause(self.config.poll_interval_s, stop, self._more, self.wake)
                continue
            self._forget_idle_limits()
            self.wake.clear()
            sleep_s = await self._until_next_ready()
            await pause(sleep_s, stop, self.wake, self._more)

    async def _until_next_ready(self) -> float:
        try:
            due_in = await self.db.statement(lambda tx: tx.executions.next_ready_in(HTTP_QUEUE))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("http pool could not read the next ready time")
            return self.config.poll_interval_s
        if due_in is None:
            return self.config.poll_interval_s
        if due_in <= 0:
            # Ready now, yet the lease found nothing: rows of tenants left out (their drain wakes us through
            # _more, so look only now and then), at their in-flight quota, or locked by another executor.
            # Look again soon, not in a tight loop.
            return READY_RECHECK_SKIPPED_S if self._skipped else READY_RECHECK_S
        return min(self.config.poll_interval_s, due_in)

    async def _renew_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await pause(self.config.renew_every_s, stop)
            if stop.is_set():
                return
            try:
                await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("http pool lease renewal failed; retrying", extra={"held": len(self._held)})

    async def renew_once(self) -> int:
        """Renew the lease of every held delivery (restarting the clock of those still waiting); a waiting
        delivery whose lease was lost is dropped unsent. Returns how many were renewed."""
        entries = [e for e in self._held.values() if e.waiting or e.sending]
        if not entries:
            return 0
        began = self.clock()
        renewals = [
            ex.Renewal(e.item.execution_id, e.item.attempt, restart=e.waiting, scheduled_for=e.item.scheduled_for)
            for e in entries
        ]
        renewed = await self.db.transaction(
            lambda tx: tx.executions.renew_many(renewals, self.config.worker_id, self.config.lease_s),
            isolation=self.config.isolation,
        )
        for entry, renewal in zip(entries, renewals, strict=True):
            if entry.item.execution_id in renewed:
                if renewal.restart and entry.waiting:
                    entry.deadline = began + entry.item.timeout_s
                    entry.leased_at = began
            elif entry.waiting and entry.key is not None:
                self._waiting[entry.key].remove(entry)
                if not self._waiting[entry.key]:
                    del self._waiting[entry.key]
                self._unwait(entry)
                log.info(
                    "execution outcome",
                    extra={
                        "execution_id": entry.item.execution_id,
                        "attempt": entry.item.attempt,
                        "outcome": "lease_lost",
                    },
                )
                self._let_go(entry)
        return len(renewed)

    async def _restart_flush(self, entries: Sequence[Held]) -> list[bool]:
        """Restart the attempt clock of deliveries that waited long for a slot, as they start."""
        began = self.clock()
        renewals = [
            ex.Renewal(e.item.execution_id, e.item.attempt, restart=True, scheduled_for=e.item.scheduled_for)
            for e in entries
        ]
        renewed = await self.db.transaction(
            lambda tx: tx.executions.renew_many(renewals, self.config.worker_id, self.config.lease_s),
            isolation=self.config.isolation,
        )
        for entry in entries:
            if entry.item.execution_id in renewed:
                entry.deadline = began + entry.item.timeout_s
        return [e.item.execution_id in renewed for e in entries]

    async def close(self, grace_s: float = 5.0) -> None:
        """Let requests in flight finish for ``grace_s``; hand back the rest, and every waiting delivery, unspent."""
        waiting = [e for q in self._waiting.values() for e in q]
        self._waiting.clear()
        self._waiting_by_tenant.clear()
        for entry in waiting:
            entry.waiting = False
            self._held.pop(entry.item.execution_id, None)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        left = waiting + [e for e in self._held.values() if e.sending]
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if left:
            refs = [e.ref for e in left]
            try:
                await self.db.transaction(lambda tx: tx.executions.defer_many(refs, [0.0] * len(refs)))
            except Exception:
                log.exception("could not hand back deliveries; their leases will expire")
            log.info("handed back deliveries", extra={"count": len(left)})
        await self.send.close()

    # -- one delivery --------------------------------------------------------------------------------

    async def _deliver(self, entry: Held, *, restart: bool) -> None:
        try:
            if restart and not await self._restarter.submit(entry):
                log.info(
                    "execution outcome",
                    extra={
                        "execution_id": entry.item.execution_id,
                        "attempt": entry.item.attempt,
                        "outcome": "lease_lost",
                    },
                )
                return
            item = entry.item
            if item.payload_ref is not None:  # the job's payload is in the object store: read it first
                resolved = await resolve_leased(self.payloads, [item], self.outcomes)
                if not resolved:
                    return  # its attempt already failed, saying why
                item = resolved[0]
            sent: list[datetime] = []
            try:
                verdict = await self._attempt(entry, item, sent)
            except Exception as exc:  # never a lease lapse: the attempt fails now, saying why
                assert entry.key is not None
                self.breakers.abandon(entry.key)
                log.exception("delivery failed unexpectedly", extra={"execution_id": item.execution_id})
                verdict = Verdict("retry", f"delivery failed: {type(exc).__name__}: {exc}")
            await self._report(item, verdict, sent[0] if sent else None)
        finally:
            self._let_go(entry)

    async def _settle(self, entry: Held, verdict: Verdict) -> None:
        try:
            await self._report(entry.item, verdict, None)
        finally:
            self._let_go(entry)
