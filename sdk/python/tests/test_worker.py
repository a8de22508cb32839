"""Worker against the fake executor: outcomes, batching and its fallback, LEASE_LOST, shutdown."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from fake_executor import Served, until

from kairos_sdk import NonRetryable, Worker


async def _run(worker: Worker) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(worker.run(stop))


async def test_returns_complete_raises_fail_and_non_retryable_dead_letters(served: Served) -> None:
    fake = served.executor
    ok, flaky, bad = fake.add({"do": "ok"}), fake.add({"do": "flaky"}), fake.add({"do": "bad"})

    async def handler(execution):
        if execution.payload["do"] == "bad":
            raise NonRetryable("cannot ever work")
        if execution.payload["do"] == "flaky":
            raise RuntimeError("try again")
        return {"handled": execution.execution_id, "key": execution.idempotency_key}

    worker = Worker("jobs", handler, addr=served.addr, api_key="k1", wait_seconds=0.2)
    stop, run = await _run(worker)
    await until(lambda: len(fake.outcomes) == 3, what="three outcomes")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.outcomes == {
        ok: ("complete", {"handled": ok, "key": f"{ok}:1"}),
        flaky: ("fail", "RuntimeError: try again", True),
        bad: ("fail", "cannot ever work", False),
    }
    assert worker.stats == {"completed": 1, "failed": 2, "lease_lost": 0}
    assert set(fake.keys) == {"Bearer k1"}
    assert "Complete" not in fake.calls and "Fail" not in fake.calls  # sent batched


async def test_sync_handler_result_is_reported(served: Served) -> None:
    eid = served.executor.add(3)
    worker = Worker("jobs", lambda e: e.payload * 2, addr=served.addr, api_key="k", wait_seconds=0.2)
    stop, run = await _run(worker)
    await until(lambda: eid in served.executor.outcomes, what="the outcome")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert served.executor.outcomes[eid] == ("complete", 6)


async def test_an_executor_without_batched_calls_gets_one_call_per_outcome(served: Served) -> None:
    fake = served.executor
    fake.batched = False
    ok, bad = fake.add({"do": "ok"}), fake.add({"do": "bad"})

    async def handler(execution):
        if execution.payload["do"] == "bad":
            raise NonRetryable("no")
        return 1

    worker = Worker("jobs", handler, addr=served.addr, api_key="k", wait_seconds=0.2)
    stop, run = await _run(worker)
    await until(lambda: len(fake.outcomes) == 2, what="both outcomes")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.outcomes == {ok: ("complete", 1), bad: ("fail", "no", False)}
    assert {"Complete", "Fail"} <= set(fake.calls)
    assert worker._reporter is not None and not worker._reporter.batched


async def test_lease_lost_on_heartbeat_cancels_the_handler_and_drops_its_result(served: Served) -> None:
    fake = served.executor
    eid = fake.add()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(_execution):
        started.set()
        try:
            await asyncio.Event().wait()  # runs until cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = Worker("jobs", handler, addr=served.addr, api_key="k", lease_seconds=0.6, wait_seconds=0.2)
    stop, run = await _run(worker)
    await asyncio.wait_for(started.wait(), 10)
    fake.lost.add(eid)
    await asyncio.wait_for(cancelled.wait(), 10)
    stop.set()
    await asyncio.wait_for(run, 10)
    assert "Heartbeat" in fake.calls
    assert worker.stats == {"completed": 0, "failed": 0, "lease_lost": 1}
    assert eid not in fake.outcomes


async def test_lease_lost_in_a_batched_complete_is_counted_as_lost(served: Served) -> None:
    fake = served.executor
    stale, fresh = fake.add(), fake.add()
    fake.lost.add(stale)
    worker = Worker("jobs", lambda e: "done", addr=served.addr, api_key="k", wait_seconds=0.2)
    stop, run = await _run(worker)
    await until(lambda: worker.stats["lease_lost"] == 1 and worker.stats["completed"] == 1, what="both reports")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.outcomes == {fresh: ("complete", "done")}


async def test_a_report_answered_unavailable_is_sent_again_not_lost(served: Served, caplog) -> None:
    """An executor restarting answers UNAVAILABLE: the outcome is reported once it is back, so the
    execution is not run a second time when its lease expires."""
    fake = served.executor
    fake.unavailable_completes = 2
    eid = fake.add()
    worker = Worker("jobs", lambda e: "done", addr=served.addr, api_key="k", wait_seconds=0.2)
    stop, run = await _run(worker)
    with caplog.at_level(logging.WARNING, logger="kairos.worker"):
        await until(lambda: worker.stats["completed"] == 1, what="the third report")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.outcomes == {eid: ("complete", "done")}
    assert fake.calls.count("CompleteMany") == 3
    assert sum("sending them again" in r.getMessage() for r in caplog.records) == 2


def test_a_report_is_sent_again_only_after_a_transient_failure_and_within_retry_s() -> None:
    from kairos_sdk.reporter import OutcomeReporter, _Batch

    class Refused(grpc.aio.AioRpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="no")

    async def main() -> list[int]:
        sent = []
        for code, retry_s in ((grpc.StatusCode.INVALID_ARGUMENT, 30.0), (grpc.StatusCode.UNAVAILABLE, 0.25)):
            reporter, calls = OutcomeReporter(None, retry_s=retry_s), []  # type: ignore[arg-type]

            async def send(items, code=code, calls=calls):
                calls.append(len(items))
                raise Refused(code)

            batch: _Batch = _Batch()
            with pytest.raises(grpc.aio.AioRpcError):
                await reporter._sent(batch, send)
            sent.append(len(calls))
        return sent

    # Refused outright: sent once. UNAVAILABLE throughout: sent at 0 and 0.1 s; the next (0.3 s) is past retry_s.
    assert asyncio.run(main()) == [1, 2]


async def test_shutdown_flushes_buffered_outcomes_and_fails_handlers_past_the_grace(served: Served) -> None:
    fake = served.executor
    quick, stuck = fake.add({"do": "ok"}), fake.add({"do": "hang"})
    quick_done = asyncio.Event()

    async def handler(execution):
        if execution.payload["do"] == "hang":
            await asyncio.Event().wait()
        quick_done.set()
        return "ok"

    # A report window far longer than the test: only the shutdown can send the quick outcome.
    worker = Worker("jobs", handler, addr=served.addr, api_key="k", wait_seconds=0.2, report_s=3600, grace_s=0.2)
    stop, run = await _run(worker)
    await asyncio.wait_for(quick_done.wait(), 10)
    assert fake.outcomes == {}
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.outcomes == {
        quick: ("complete", "ok"),
        stuck: ("fail", "worker stopped before the handler finished", True),
    }


async def test_a_handler_past_its_timeout_fails_retryably(served: Served) -> None:
    eid = served.executor.add(timeout_seconds=1)

    async def handler(_execution):
        await asyncio.Event().wait()

    worker = Worker("jobs", handler, addr=served.addr, api_key="k", wait_seconds=0.2)
    stop, run = await _run(worker)
    await until(lambda: eid in served.executor.outcomes, what="the timeout")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert served.executor.outcomes[eid] == ("fail", "timed out after 1s", True)


async def test_a_slot_is_free_once_the_handler_returns_not_when_its_outcome_is_acknowledged(served: Served) -> None:
    fake = served.executor
    fake.hold_completes = asyncio.Event()
    first, second = fake.add({"n": 1}), fake.add({"n": 2})
    started: list[str] = []

    async def handler(execution):
        started.append(execution.execution_id)

    worker = Worker("jobs", handler, addr=served.addr, api_key="k1", concurrency=1, wait_seconds=0.2)
    stop, run = await _run(worker)
    # With one slot, the second handler runs while the first outcome still waits for its answer.
    await until(lambda: len(started) == 2, what="both handlers started")
    assert fake.outcomes == {}
    fake.hold_completes.set()
    await until(lambda: len(fake.outcomes) == 2, what="both outcomes")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert started == [first, second]
    assert worker.stats == {"completed": 2, "failed": 0, "lease_lost": 0}


async def test_an_idle_worker_says_no_work_was_leased_but_not_while_a_handler_runs(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kairos.worker")
    fake = served.executor
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(_execution):
        started.set()
        await release.wait()

    eid = fake.add()
    worker = Worker("jobs", handler, addr=served.addr, api_key="k", wait_seconds=0.05, idle_notice_s=0.2)
    stop, run = await _run(worker)

    def notices() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("no work leased")]

    await asyncio.wait_for(started.wait(), 10)
    # Busy: ten more empty long polls (at least 0.5 s, over twice the notice interval) and no notice.
    leases = fake.calls.count("Lease")
    await until(lambda: fake.calls.count("Lease") >= leases + 10, what="ten more lease calls")
    assert notices() == []
    release.set()
    await until(lambda: eid in fake.outcomes and bool(notices()), what="the idle notice")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert notices()[0] == (
        "no work leased from pool jobs in the last 0.2 s: is any job targeting queue jobs with this tenant's key?"
    )


async def test_prefetch_leases_ahead_but_never_runs_more_handlers_than_concurrency(served: Served) -> None:
    fake = served.executor
    ids = [fake.add(i) for i in range(6)]
    running, most = 0, 0
    release = asyncio.Event()

    async def handler(execution):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    worker = Worker("jobs", handler, addr=served.addr, api_key="k", concurrency=2, prefetch=2, wait_seconds=0.2)
    stop, run = await _run(worker)
    # Two run, two more are leased ahead and wait in the worker; the last two stay on the server.
    await until(lambda: len(fake._ready) == 2 and running == 2, what="four leased, two running")
    assert worker.lease_ahead == 2 and most == 2
    release.set()
    await until(lambda: len(fake.outcomes) == 6, what="every outcome")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert most == 2 and set(fake.outcomes) == set(ids)


async def test_prefetch_by_default_is_sized_from_the_lease_round_trip_against_the_handlers(served: Served) -> None:
    worker = Worker("jobs", lambda e: None, addr=served.addr, api_key="k", concurrency=16)
    assert worker.lease_ahead == 0  # nothing measured yet
    worker._lease_rtt_s, worker._handler_s = 0.005, 0.005  # a round trip as long as a handler: a slot each
    assert worker.lease_ahead == 16
    worker._handler_s = 30.0  # long handlers: never sit on work another worker could start
    assert worker.lease_ahead == 0
    assert Worker("jobs", lambda e: None, addr=served.addr, api_key="k", prefetch=0).lease_ahead == 0


async def test_under_load_a_lease_asks_for_half_a_batch_at_least_not_for_each_slot_that_frees(served: Served) -> None:
    fake = served.executor
    for i in range(200):
        fake.add(i)

    async def handler(execution):
        await asyncio.sleep(0.0005 * (execution.payload % 7))  # slots free one by one

    worker = Worker(
        "jobs",
        handler,
        addr=served.addr,
        api_key="k",
        concurrency=16,
        batch=16,
        prefetch=0,
        gather_s=0.05,
        wait_seconds=0.2,
    )
    stop, run = await _run(worker)
    await until(lambda: len(fake.outcomes) == 200, what="every outcome")
    stop.set()
    await asyncio.wait_for(run, 10)
    busy_asks = [n for n in fake.lease_asks[1:-1] if n]  # the first (idle) and the last (drained) ask may be anything
    assert busy_asks and min(busy_asks) >= 8, fake.lease_asks


async def test_without_an_explicit_batch_a_lease_asks_for_every_free_slot_prefetch_included(served: Served) -> None:
    # One Lease call is in flight at a time: capped at `concurrency`, a worker that leases ahead could
    # never take more than a batch per round trip however many of its slots are free.
    fake = served.executor
    for i in range(40):
        fake.add(i)
    release = asyncio.Event()

    async def handler(execution):
        await release.wait()

    asks: dict[str, list[int]] = {}
    for label, batch in (("default", None), ("explicit", 4)):
        fake.lease_asks.clear()
        worker = Worker(
            "jobs", handler, addr=served.addr, api_key="k", concurrency=4, prefetch=4, batch=batch, wait_seconds=0.2
        )
        stop, run = await _run(worker)
        await until(lambda: sum(fake.lease_asks) >= 8 or len(fake.lease_asks) >= 2, what="the first leases")
        asks[label] = list(fake.lease_asks)
        release.set()
        stop.set()
        await asyncio.wait_for(run, 10)
        release.clear()
    assert asks["default"][0] == 8, asks  # concurrency 4 + prefetch 4, in one call
    assert asks["explicit"][:2] == [4, 4], asks  # an explicit batch still bounds every call


@pytest.mark.parametrize("lease_calls", [1, 2])
async def test_under_load_lease_calls_go_out_at_once_but_idle_there_is_one(served: Served, lease_calls: int) -> None:
    fake = served.executor
    fake.lease_delay_s = 0.02  # a round trip longer than a handler

    async def handler(execution):
        await asyncio.sleep(0.002)

    worker = Worker(
        "jobs",
        handler,
        addr=served.addr,
        api_key="k",
        concurrency=4,
        prefetch=4,
        wait_seconds=0.1,
        lease_calls=lease_calls,
    )
    stop, run = await _run(worker)
    await until(lambda: len(fake.lease_asks) >= 3, what="idle long polls")
    assert fake.most_leases_in_flight == 1  # nothing to do: a single long poll at a time
    ids = [fake.add(i) for i in range(60)]
    await until(lambda: len(fake.outcomes) == 60, what="every outcome")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.most_leases_in_flight == lease_calls and set(fake.outcomes) == set(ids)


async def test_idle_a_worker_with_a_small_explicit_batch_still_has_one_long_poll(served: Served) -> None:
    fake = served.executor
    worker = Worker(
        "jobs", lambda e: None, addr=served.addr, api_key="k", concurrency=8, batch=2, prefetch=0, wait_seconds=0.1
    )
    stop, run = await _run(worker)
    await until(lambda: len(fake.lease_asks) >= 3, what="idle long polls")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert fake.most_leases_in_flight == 1 and set(fake.lease_asks) == {2}


async def test_slots_admit_at_most_n_in_arrival_order_and_pass_on_a_cancelled_waiters_place() -> None:
    from kairos_sdk.worker import _Slots

    slots, inside, most, order = _Slots(2), 0, 0, []
    release = asyncio.Event()

    async def holder(name: str) -> None:
        nonlocal inside, most
        async with slots:
            inside += 1
            most = max(most, inside)
            order.append(name)
            await release.wait()
            inside -= 1

    tasks = {name: asyncio.create_task(holder(name)) for name in "abcdef"}
    await until(lambda: order == ["a", "b"] and len(slots._waiters) == 4, what="two inside, four waiting")
    tasks["c"].cancel()  # waiting: it leaves the queue without taking a place
    await until(lambda: len(slots._waiters) == 3, what="the cancelled waiter gone")
    release.set()
    await asyncio.gather(*(t for n, t in tasks.items() if n != "c"))
    assert most == 2 and order == ["a", "b", "d", "e", "f"] and tasks["c"].cancelled()

    # A waiter cancelled just as a place is handed to it passes the place on.
    slots = _Slots(1)
    await slots.__aenter__()
    first = asyncio.create_task(slots.__aenter__())
    second = asyncio.create_task(slots.__aenter__())
    await until(lambda: len(slots._waiters) == 2, what="both waiting")
    await slots.__aexit__(None, None, None)  # the place goes to `first` ...
    first.cancel()  # ... which is cancelled before it runs
    await asyncio.wait_for(second, 1)
    assert first.cancelled() and second.done()
