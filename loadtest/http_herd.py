"""The HTTP-target scenarios of ``loadtest/herd.py``: webhooks delivered by the executors to a real receiver.

Every scenario starts ``loadtest/receiver.py`` (uvicorn, its own processes, answering 200 at once or after a
set delay per port), then the usual stack (API, scheduler, executors; no SDK workers) with the receiver's
loopback ports allowed by the egress policy. Jobs are submitted through the REST API with ``http`` targets.
What the tenant sees is the receipt: lag = the time the receiver read the request's headers minus the
occurrence's due time; a job received more than once is a duplicate, one never received (or never
succeeded in the database) is lost.

  http10k     10,000 jobs of one tenant to one origin, due at T: every one received within 3 s
  httpmixed   tenant hog's 30,000 to its origin and 10 small tenants x 100 to their own, due at T:
              small tenants' p99 <= 1 s, every one received within 10 s
  httpslow    tenant A's 200 to an origin answering after 5 s, tenant B's 2,000 to a fast one, due at T:
              B's p99 <= 1 s
  httplight   20 jobs due at T1, then 50 due at T2: p99 <= 300 ms each (no second wave)
  httpsteady  500 deliveries/s for 2 minutes over 50 origins (cron jobs with a 60 s jitter window):
              p99 <= 1 s
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.domain.schedule import jitter_offset_s

if TYPE_CHECKING:
    from herd import Run, Stack

HERE = Path(__file__).resolve().parent


def herd_module() -> Any:
    """herd.py's module: ``__main__`` when it runs as the bench, else imported (its helpers live there)."""
    return sys.modules.get("__main__") if hasattr(sys.modules.get("__main__"), "Stack") else __import__("herd")


@dataclass
class Receipt:
    at: float
    port: int
    execution_id: str
    job_id: str
    attempt: int
    scheduled_for: str


class Receiver:
    """``loadtest/receiver.py`` on ``ports``, its receipts read back from its folder."""

    def __init__(self, run: Run, label: str, ports: list[int], slow: dict[int, float] | None = None) -> None:
        self.run = run
        self.ports = ports
        self.out = run.tmp / f"{label}-receipts"
        argv = [
            sys.executable,
            str(HERE / "receiver.py"),
            "--ports",
            ",".join(map(str, ports)),
            "--out",
            str(self.out),
            "--processes",
            str(run.args.receiver_processes),
        ]
        for port, delay in (slow or {}).items():
            argv += ["--slow", f"{port}:{delay}"]
        self.proc = run.procs.start(f"{label}-receiver", argv, {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"})

    async def ready(self, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        for port in self.ports:
            while True:
                if self.proc.popen.poll() is not None:
                    raise RuntimeError(f"receiver exited: {self.proc.tail()}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > end:
                        raise RuntimeError(f"receiver not listening on {port} after {timeout_s:.0f} s") from None
                    await asyncio.sleep(0.1)

    def receipts(self) -> list[Receipt]:
        out = []
        for path in sorted(self.out.glob("receipts-*.tsv")):
            for line in path.read_text().splitlines():
                at, port, execution_id, job_id, attempt, scheduled = line.split("\t")
                out.append(
                    Receipt(
                        float(at), int(port), execution_id, job_id, int(attempt) if attempt.isdigit() else 0, scheduled
                    )
                )
        return out

    def count(self) -> int:
        return sum(path.read_bytes().count(b"\n") for path in self.out.glob("receipts-*.tsv"))

    async def wait_for(self, expected: int, timeout_s: float) -> int:
        """Poll the receipts (flushed every 0.25 s) until ``expected`` arrived or ``timeout_s`` passed."""
        end = time.monotonic() + timeout_s
        n = self.count()
        while n < expected and time.monotonic() < end:
            await asyncio.sleep(0.25)
            n = self.count()
        return n


def http_body(url_of: dict[str, str]) -> Any:
    def body(name: str, tenant: str, schedule: dict[str, Any]) -> bytes:
        return json.dumps(
            {
                "name": name,
                "target": {"type": "http", "ref": url_of[tenant]},
                "payload": {"bench": True},
                "schedule": schedule,
            },
            separators=(",", ":"),
        ).encode()

    return body


def http_env(run: Run) -> dict[str, str]:
    env = {"KAIROS_HTTP_EGRESS_ALLOW": "127.0.0.1"}
    if run.args.http_concurrency:
        env["KAIROS_HTTP_CONCURRENCY"] = str(run.args.http_concurrency)
    return env


def receipt_figures(receipts: list[Receipt], due_of: dict[str, float], t0: float | None = None) -> dict[str, Any]:
    """Lag (first receipt - due) per job, duplicates (receipts of a job beyond its first), and the drain."""
    h = herd_module()
    first: dict[str, float] = {}
    count: dict[str, int] = defaultdict(int)
    for r in receipts:
        if r.job_id not in due_of:
            continue
        count[r.job_id] += 1
        if r.job_id not in first or r.at < first[r.job_id]:
            first[r.job_id] = r.at
    lags = [at - due_of[j] for j, at in first.items()]
    out: dict[str, Any] = {
        "jobs": len(due_of),
        "received": len(first),
        "notReceived": len(due_of) - len(first),
        "duplicates": sum(n - 1 for n in count.values()),
        "receiptLagS": h.summary(lags),
    }
    if t0 is not None and first:
        last = max(first.values())
        out["lastReceiptAfterTS"] = last - t0
        out["receivedPerS"] = len(first) / (last - t0) if last > t0 else None
        buckets: dict[int, int] = defaultdict(int)
        for at in first.values():
            buckets[math.floor((at - t0) * 2)] += 1
        out["receivedPerHalfSecond"] = {f"{k / 2:.1f}": v for k, v in sorted(buckets.items())}
    return out


def cpu_per_delivery(res: dict[str, Any], deliveries: int) -> dict[str, float]:
    cpu = res.get("cpuSecondsDuringDrain") or res.get("cpuSecondsDuringWindow") or {}
    return {k: round(1e6 * v / deliveries, 1) for k, v in cpu.items() if deliveries and k != "generator"}


def delivery_rows(
    run: Run,
    name: str,
    fig: dict[str, Any],
    *,
    within_s: float | None,
    rate_target: float | None,
    correctness: dict[str, Any],
) -> None:
    h = herd_module()
    lag = fig["receiptLagS"]
    run.row(name, "receipt lag p50 / p99", "-", f"{h.fmt_s(lag['p50'])} / {h.fmt_s(lag['p99'])}", None)
    missing = fig["notReceived"]
    measured = h.fmt_s(lag["max"]) + (f" ({missing} never received)" if missing else "")
    if within_s is not None:
        run.row(
            name,
            "every job received within (max receipt lag)",
            f"<= {within_s:g} s",
            measured,
            lag["max"] is not None and lag["max"] <= within_s and not missing,
        )
    if "receivedPerS" in fig:
        run.row(
            name,
            "received/s (T to last receipt)",
            f">= {rate_target:,.0f}/s" if rate_target else "-",
            h.fmt_rate(fig.get("receivedPerS")),
            None if rate_target is None else (fig.get("receivedPerS") or 0) >= rate_target,
        )
    dup = fig["duplicates"]
    run.row(name, "received twice (duplicates)", "0", str(dup), dup == 0)
    lost = correctness["lostJobs"]
    run.row(name, "lost (never succeeded)", "0", str(lost), lost == 0)
    if dup or lost or missing:
        run.failed = True


async def http_herd(
    run: Run, name: str, groups: list[tuple[str, int, int]], *, slow: dict[int, float] | None = None
) -> tuple[dict[str, Any], list[Receipt]]:
    """groups: (tenant, jobs, receiver port); every job due at one instant T."""
    h = herd_module()
    ports = sorted({p for _, _, p in groups})
    receiver = Receiver(run, name, ports, slow)
    try:
        await receiver.ready()
        stack: Stack = h.Stack(run, name, env=http_env(run), workers=False)
        stack.cpu_roots["receiver"] = [receiver.proc.popen.pid]
        url_of = {t: f"http://127.0.0.1:{p}/hook/{t}" for t, _, p in groups}
        res = await h.herd(run, name, [(t, n) for t, n, _ in groups], body_of=http_body(url_of), stack=stack)
        occ = res.pop("_occ")
        await receiver.wait_for(len(occ), 10.0)
        receipts = receiver.receipts()
    finally:
        run.procs.stop([receiver.proc], grace_s=5)
    res["_occ"] = occ
    res["receiverProcesses"] = run.args.receiver_processes
    return res, receipts


def _occ_due(occ: list[Any]) -> dict[str, float]:
    return {o.job_id: o.due for o in occ}


def settings_row(run: Run, name: str) -> None:
    """What delivered: the executors and their HTTP settings, the receiver's processes."""
    from app.config import Settings

    a, d = run.args, Settings()
    concurrency = a.http_concurrency or d.http_concurrency
    per_tenant = d.http_per_tenant or concurrency // 2
    run.row(
        name,
        "executors x (in flight, per tenant, per origin start-ceiling); receiver processes",
        "-",
        f"{a.executors} x ({concurrency}, {per_tenant}, 32-{d.http_per_origin}); {a.receiver_processes}",
        None,
    )


def _common(run: Run, name: str, res: dict[str, Any], fig: dict[str, Any]) -> None:
    h = herd_module()
    settings_row(run, name)
    per = cpu_per_delivery(res, fig["received"])
    res["cpuUsPerDelivery"] = per
    res["receipts"] = fig
    run.row(
        name,
        "CPU per delivery, us: executors / PostgreSQL / receiver / api / scheduler",
        "-",
        " / ".join(f"{per.get(k, 0):,.0f}" for k in ("executor", "postgres", "receiver", "api", "scheduler")),
        None,
    )
    run.row(name, "database start lag p99 (side figure)", "-", h.fmt_s(res["startLagS"]["p99"]), None)


async def scenario_http10k(run: Run) -> None:
    a = run.args
    port = herd_module().free_port()
    res, receipts = await http_herd(run, "http10k", [("hooks", a.http10k_jobs, port)])
    occ = res.pop("_occ")
    fig = receipt_figures(receipts, _occ_due(occ), res["T"])
    _common(run, "http10k", res, fig)
    run.results["http10k"] = res
    delivery_rows(run, "http10k", fig, within_s=3.0, rate_target=3500, correctness=res["correctness"])


async def scenario_httpmixed(run: Run) -> None:
    a = run.args
    free = herd_module().free_port
    groups = [("hog", a.httpmixed_hog, free())] + [
        (f"small-{i:02d}", a.httpmixed_small_jobs, free()) for i in range(1, a.httpmixed_small + 1)
    ]
    res, receipts = await http_herd(run, "httpmixed", groups)
    occ = res.pop("_occ")
    due = _occ_due(occ)
    fig = receipt_figures(receipts, due, res["T"])
    small_jobs = {o.job_id for o in occ if o.tenant.startswith("small-")}
    small = receipt_figures(
        [r for r in receipts if r.job_id in small_jobs], {j: d for j, d in due.items() if j in small_jobs}
    )
    _common(run, "httpmixed", res, fig)
    res["receiptsSmall"] = small
    run.results["httpmixed"] = res
    p99 = small["receiptLagS"]["p99"]
    run.row(
        "httpmixed",
        "small tenants' receipt lag p99",
        "<= 1 s",
        herd_module().fmt_s(p99),
        p99 is not None and p99 <= 1.0,
    )
    delivery_rows(run, "httpmixed", fig, within_s=10.0, rate_target=None, correctness=res["correctness"])


async def scenario_httpslow(run: Run) -> None:
    a = run.args
    free = herd_module().free_port
    slow_port, fast_port = free(), free()
    res, receipts = await http_herd(
        run,
        "httpslow",
        [("A", a.httpslow_a, slow_port), ("B", a.httpslow_b, fast_port)],
        slow={slow_port: a.httpslow_delay_s},
    )
    occ = res.pop("_occ")
    due = _occ_due(occ)
    fig = receipt_figures(receipts, due, res["T"])
    b_jobs = {o.job_id for o in occ if o.tenant == "B"}
    b = receipt_figures([r for r in receipts if r.job_id in b_jobs], {j: d for j, d in due.items() if j in b_jobs})
    _common(run, "httpslow", res, fig)
    res["receiptsB"] = b
    run.results["httpslow"] = res
    p99 = b["receiptLagS"]["p99"]
    run.row(
        "httpslow",
        f"B's receipt lag p99 (A's origin answers after {a.httpslow_delay_s:g} s)",
        "<= 1 s",
        herd_module().fmt_s(p99),
        p99 is not None and p99 <= 1.0,
    )
    delivery_rows(run, "httpslow", fig, within_s=None, rate_target=None, correctness=res["correctness"])


async def scenario_httplight(run: Run) -> None:
    h = herd_module()
    a = run.args
    port = h.free_port()
    receiver = Receiver(run, "httplight", [port])
    stack = h.Stack(run, "httplight", env=http_env(run), workers=False)
    stack.cpu_roots["receiver"] = [receiver.proc.popen.pid]
    try:
        await receiver.ready()
        await stack.up(["light"])
        key = stack.tenants["light"].key
        body_of = http_body({"light": f"http://127.0.0.1:{port}/hook/light"})
        sizes = [int(x) for x in a.httplight_bursts.split(",")]
        t = math.ceil(time.time() + a.lead_min + 2)
        dues = [t + 3.0 * i for i in range(len(sizes))]
        bodies = [
            body_of(f"light-{n}", "light", {"runAt": h.iso(datetime.fromtimestamp(d, timezone.utc))})
            for n, d in zip(sizes, dues, strict=True)
            for _ in range(n)
        ]
        await h.submit(stack.http, lambda i: (key, bodies[i]), count=len(bodies), concurrency=4)
        accepted = stack.sql1("SELECT count(*) FROM jobs WHERE name LIKE 'light-%'")
        await asyncio.sleep(max(0.0, dues[0] - 1 - time.time()))
        await h.wait_drain(run, stack, accepted, dues[-1] + 30, t0=None)
        occ, per_job = h.occurrences(stack, "light-%")
        await receiver.wait_for(len(occ), 10.0)
        receipts = receiver.receipts()
        c = h.correctness(occ, per_job)
        res: dict[str, Any] = {"correctness": c, "bursts": {}}
        for n, d in zip(sizes, dues, strict=True):
            due = {o.job_id: o.due for o in occ if abs(o.due - d) < 1e-3}
            fig = receipt_figures(receipts, due, d)
            res["bursts"][str(n)] = fig
            p99 = fig["receiptLagS"]["p99"]
            waves = sorted(fig.get("receivedPerHalfSecond", {}).items())
            run.row(
                "httplight",
                f"burst of {n}: receipt lag p99 / max",
                "<= 300 ms",
                f"{h.fmt_s(p99)} / {h.fmt_s(fig['receiptLagS']['max'])}"
                + (f" ({fig['notReceived']} never received)" if fig["notReceived"] else ""),
                p99 is not None and p99 <= 0.3 and not fig["notReceived"],
            )
            res["bursts"][str(n)]["waves"] = waves
        run.results["httplight"] = res
        all_fig = receipt_figures(receipts, {o.job_id: o.due for o in occ})
        delivery_rows(run, "httplight", all_fig, within_s=None, rate_target=None, correctness=c)
    finally:
        await stack.down()
        run.procs.stop([receiver.proc], grace_s=5)


async def scenario_httpsteady(run: Run) -> None:
    """rate*60 cron jobs `* * * * *` (60 s jitter window) spread over `origins` receiver ports and 10 tenants;
    measured: the occurrences due in [M, M + seconds) and their receipts."""
    h = herd_module()
    a = run.args
    n = a.httpsteady_rate * 60
    need = n / 150 + 60 + a.httpsteady_seconds + 60
    if need > run.left():
        raise h.ScenarioFailed(f"needs up to {need:.0f} s, {run.left():.0f} s left")
    ports = [h.free_port() for _ in range(a.httpsteady_origins)]
    tenants = [f"steady-{i:02d}" for i in range(1, 11)]
    receiver = Receiver(run, "httpsteady", ports)
    stack = h.Stack(run, "httpsteady", env=http_env(run), workers=False)
    stack.cpu_roots["receiver"] = [receiver.proc.popen.pid]
    try:
        await receiver.ready()
        await stack.up(tenants)
        schedule = {"cron": "* * * * *", "tz": "UTC", "jitterSeconds": 60}
        bodies = []
        for i in range(n):
            tenant = tenants[i % len(tenants)]
            url = f"http://127.0.0.1:{ports[i % len(ports)]}/hook/{tenant}"
            bodies.append((stack.tenants[tenant].key, http_body({tenant: url})("steady", tenant, schedule)))
        print(f"  [httpsteady] submitting {n} cron jobs over {len(ports)} origins")
        sub = await h.submit(stack.http, lambda i: bodies[i], count=n, concurrency=a.submit_concurrency)
        m = (math.floor(time.time() / 60) + 1) * 60
        if m - time.time() < 3:
            m += 60
        end = m + a.httpsteady_seconds
        print(
            f"  [httpsteady] {sub.ok_items} jobs in {sub.seconds:.1f} s; measuring from {m - time.time():.0f} s "
            f"from now for {a.httpsteady_seconds} s"
        )
        await asyncio.sleep(max(0.0, m - 1 - time.time()))
        cpu0 = stack.cpu()
        await asyncio.sleep(max(0.0, end + 5 - time.time()))
        cpu1 = stack.cpu()
        jobs = stack.sql("SELECT job_id::text, jitter_s FROM jobs WHERE name = 'steady'")
        due: dict[str, float] = {}  # (job, due) keyed by job:minute
        for job_id, jitter_s in jobs:
            off = jitter_offset_s(job_id, jitter_s)
            for k in range(a.httpsteady_seconds // 60 + 2):
                d = m - 60 + k * 60 + off
                if m <= d < end:
                    due[f"{job_id}@{d - off:.0f}"] = d
        receipts = []
        for r in receiver.receipts():
            sched = datetime.fromisoformat(r.scheduled_for.replace("Z", "+00:00")).timestamp()
            r.job_id = f"{r.job_id}@{sched:.0f}"
            receipts.append(r)
        fig = receipt_figures(receipts, due)
        succeeded = stack.sql1(
            "SELECT count(*) FROM executions WHERE state = 'succeeded' "
            "AND scheduled_for >= to_timestamp(%s) - interval '60 seconds' "
            "AND scheduled_for < to_timestamp(%s)",
            (m, end),
        )
        res = {
            "jobs": n,
            "origins": len(ports),
            "submit": sub.as_json(),
            "windowStart": m,
            "occurrencesPerS": len(due) / a.httpsteady_seconds,
            "receipts": fig,
            "cpuSecondsDuringWindow": {k: round(cpu1[k] - cpu0.get(k, 0), 2) for k in cpu1},
            "succeededInDatabase": succeeded,
        }
        res["cpuUsPerDelivery"] = cpu_per_delivery(res, fig["received"])
        run.results["httpsteady"] = res
        settings_row(run, "httpsteady")
        p99 = fig["receiptLagS"]["p99"]
        run.row(
            "httpsteady",
            f"receipt lag p99 at {res['occurrencesPerS']:,.0f}/s over {len(ports)} origins",
            "<= 1 s",
            h.fmt_s(p99) + (f" ({fig['notReceived']} never received)" if fig["notReceived"] else ""),
            p99 is not None and p99 <= 1.0 and not fig["notReceived"],
        )
        per = res["cpuUsPerDelivery"]
        run.row(
            "httpsteady",
            "CPU per delivery, us: executors / PostgreSQL / receiver / api / scheduler",
            "-",
            " / ".join(f"{per.get(k, 0):,.0f}" for k in ("executor", "postgres", "receiver", "api", "scheduler")),
            None,
        )
        dup = fig["duplicates"]
        run.row("httpsteady", "received twice (duplicates)", "0", str(dup), dup == 0)
        if dup or fig["notReceived"]:
            run.failed = True
    finally:
        await stack.down()
        run.procs.stop([receiver.proc], grace_s=5)


SCENARIOS = {
    "http10k": scenario_http10k,
    "httpmixed": scenario_httpmixed,
    "httpslow": scenario_httpslow,
    "httplight": scenario_httplight,
    "httpsteady": scenario_httpsteady,
}


def add_arguments(p: Any) -> None:
    g = p.add_argument_group("HTTP scenarios")
    g.add_argument("--receiver-processes", type=int, default=1, help="uvicorn processes of the webhook receiver")
    g.add_argument("--http-concurrency", type=int, help="KAIROS_HTTP_CONCURRENCY of the executors (default: Kairos's)")
    g.add_argument("--http10k-jobs", type=int, default=10_000)
    g.add_argument("--httpmixed-hog", type=int, default=30_000)
    g.add_argument("--httpmixed-small", type=int, default=10, help="httpmixed: small tenants")
    g.add_argument("--httpmixed-small-jobs", type=int, default=100)
    g.add_argument("--httpslow-a", type=int, default=200)
    g.add_argument("--httpslow-b", type=int, default=2000)
    g.add_argument("--httpslow-delay-s", type=float, default=5.0)
    g.add_argument("--httplight-bursts", default="20,50", help="httplight: burst sizes, 3 s apart")
    g.add_argument("--httpsteady-rate", type=int, default=500)
    g.add_argument("--httpsteady-seconds", type=int, default=120)
    g.add_argument("--httpsteady-origins", type=int, default=50)
