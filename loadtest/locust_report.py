"""Start lag read back from Kairos, printed beside Locust's request statistics.

The Locust users in ``locustfile.py`` name every job ``lt-<run tag>-<kind>``. After the run this
module lists those jobs through the REST API (``GET /v1/jobs?name=...``, one page of up to 500 at
a time, per tenant), samples them if there are many, reads each sampled job's executions
(``GET /v1/jobs/{id}/executions``) and computes, per kind,

    start lag = startedAt - due time

where the due time is ``scheduledFor`` (the occurrence's nominal time) plus the job's own jitter
slot for cron jobs with ``jitterSeconds`` (the slot is computed with Kairos's own
``app.domain.schedule.jitter_offset_s`` when it is importable; otherwise the lag of those jobs is
reported against the nominal time and labelled so). Only occurrences due before the test stopped
count; occurrences that were due but had not started are waited for up to a grace period and then
counted as "not started" (the report sets Locust's exit code to 1 when there are any).

The locustfile calls :func:`report_for_environment` from its ``quitting`` listener, so the
report prints at the end of every run. It also runs on its own after a run:

    python loadtest/locust_report.py --host http://127.0.0.1:8080 --tag TAG --key KEY [--key KEY2]
        [--csv PREFIX]     # Locust's --csv output, for the request table
        [--stop-at ISO]    # occurrences due after this are ignored (default: now)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

try:  # the jitter slot as Kairos computes it (same venv as the server)
    from app.domain.schedule import jitter_offset_s as _jitter_offset_s
except ImportError:  # a load generator without the server package
    _jitter_offset_s = None

# kind -> label, in report order; locustfile.py names its jobs lt-<tag>-<kind>.
KINDS: dict[str, str] = {
    "once-at": "one-off runAt (round minute)",
    "once-delay": "one-off delaySeconds",
    "cron": "cron, every minute",
    "cron-jitter": "cron + jitterSeconds (own slot)",
    "herd": "herd (all due at T)",
}
UNSTARTED_STATES = {"ready"}
IGNORED_STATES = {"skipped", "cancelled"}


def job_name(tag: str, kind: str) -> str:
    return f"lt-{tag}-{kind}"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class KindLag:
    kind: str
    jobs: int = 0  # jobs of this kind found
    sampled: int = 0
    lags_s: list[float] = field(default_factory=list)
    not_started: int = 0  # due before the stop, still not started after the grace period
    skipped_or_cancelled: int = 0
    failed: int = 0  # executions that ended dead
    first_due: datetime | None = None
    last_due: datetime | None = None
    nominal_only: bool = False  # jitter slot unknown: lag measured from the nominal time

    def summary(self) -> dict[str, Any]:
        s = sorted(self.lags_s)
        return {
            "jobs": self.jobs,
            "sampled": self.sampled,
            "started": len(s),
            "not_started": self.not_started,
            "skipped_or_cancelled": self.skipped_or_cancelled,
            "dead": self.failed,
            "p50_s": percentile(s, 50),
            "p90_s": percentile(s, 90),
            "p99_s": percentile(s, 99),
            "max_s": s[-1] if s else math.nan,
            "within_2s": (sum(1 for v in s if v <= 2.0) / len(s)) if s else math.nan,
            "first_due": self.first_due.isoformat() if self.first_due else None,
            "last_due": self.last_due.isoformat() if self.last_due else None,
            "lag_from_nominal": self.nominal_only,
        }


@dataclass
class LagReport:
    tag: str
    stop_at: datetime
    kinds: dict[str, KindLag]
    elapsed_s: float
    requests: int  # REST calls the report itself made

    @property
    def not_started(self) -> int:
        return sum(k.not_started for k in self.kinds.values())

    def overall(self) -> dict[str, Any]:
        total = KindLag("all")
        for k in self.kinds.values():
            total.jobs += k.jobs
            total.sampled += k.sampled
            total.lags_s.extend(k.lags_s)
            total.not_started += k.not_started
            total.skipped_or_cancelled += k.skipped_or_cancelled
            total.failed += k.failed
        return total.summary()


class Api:
    """A thin REST client: one shared connection pool, a bearer key per call."""

    def __init__(self, host: str, timeout_s: float = 10.0) -> None:
        self.client = httpx.Client(
            base_url=host.rstrip("/"),
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
        )
        self.calls = 0

    def get(self, key: str, path: str, **params: Any) -> httpx.Response:
        self.calls += 1
        for attempt in range(3):
            try:
                r = self.client.get(
                    path,
                    params={k: v for k, v in params.items() if v is not None},
                    headers={"Authorization": f"Bearer {key}"},
                )
            except httpx.TransportError:
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status_code in (429, 502, 503) and attempt < 2:
                time.sleep(0.2 * (attempt + 1))
                continue
            r.raise_for_status()
            return r
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.client.close()


def list_jobs(api: Api, key: str, name: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = api.get(key, "/v1/jobs", name=name, limit=500, cursor=cursor).json()
        jobs.extend(page["jobs"])
        cursor = page.get("nextCursor")
        if not cursor:
            return jobs


def executions(api: Api, key: str, job_id: str) -> list[dict[str, Any]]:
    return api.get(key, f"/v1/jobs/{job_id}/executions", limit=100).json()


def jitter_slot_s(job: dict[str, Any]) -> int | None:
    window = (job.get("schedule") or {}).get("jitterSeconds") or 0
    if not window:
        return 0
    if _jitter_offset_s is None:
        return None
    return _jitter_offset_s(job["jobId"], int(window))


@dataclass
class JobState:
    key: str
    job: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)

    def due_of(self, run: dict[str, Any]) -> float:
        """When ``run`` was due (epoch seconds): its nominal time plus the job's jitter slot."""
        nominal = parse_time(run["scheduledFor"])
        assert nominal is not None
        return nominal.timestamp() + (jitter_slot_s(self.job) or 0)

    def pending(self, stop_ts: float) -> int:
        """Occurrences due by stop_ts that have not started (dispatched but unleased, or not dispatched)."""
        n = sum(
            1
            for r in self.runs
            if r["state"] in UNSTARTED_STATES and not r.get("startedAt") and self.due_of(r) <= stop_ts
        )
        nxt = parse_time(self.job.get("nextRunAt"))
        if self.job.get("state") == "active" and nxt is not None and nxt.timestamp() <= stop_ts:
            nominal = [parse_time(r["scheduledFor"]) for r in self.runs]
            slot = jitter_slot_s(self.job) or 0
            if not any(n_ is not None and abs(n_.timestamp() + slot - nxt.timestamp()) < 0.001 for n_ in nominal):
                n += 1  # its next occurrence is overdue and has no execution yet
        return n


def collect(
    host: str,
    keys: Sequence[str],
    tag: str,
    *,
    stop_at: datetime | None = None,
    grace_s: float = 10.0,
    sample: int = 1500,
    workers: int = 16,
    seed: int = 7,
) -> LagReport:
    """List the run's jobs, sample up to ``sample`` of them, and measure their start lag."""
    began = time.monotonic()
    stop = stop_at or datetime.now(timezone.utc)
    stop_ts = stop.timestamp()
    api = Api(host)
    kinds = {kind: KindLag(kind) for kind in KINDS}
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            listed = list(
                pool.map(
                    lambda kk: (kk[0], kk[1], list_jobs(api, kk[0], job_name(tag, kk[1]))),
                    [(key, kind) for key in dict.fromkeys(keys) for kind in KINDS],
                )
            )
            by_kind: dict[str, list[JobState]] = {kind: [] for kind in KINDS}
            for key, kind, jobs in listed:
                by_kind[kind].extend(JobState(key, job) for job in jobs)
            total = sum(len(v) for v in by_kind.values())
            rng = random.Random(seed)
            chosen: list[tuple[str, JobState]] = []
            for kind, states in by_kind.items():
                kinds[kind].jobs = len(states)
                share = len(states) if total <= sample else max(1, round(sample * len(states) / total))
                picked = states if share >= len(states) else rng.sample(states, share)
                kinds[kind].sampled = len(picked)
                chosen.extend((kind, s) for s in picked)

            def refresh(state: JobState) -> JobState:
                state.runs = executions(api, state.key, state.job["jobId"])
                return state

            def refresh_job(state: JobState) -> JobState:
                state.job = api.get(state.key, f"/v1/jobs/{state.job['jobId']}").json()
                return refresh(state)

            list(pool.map(refresh, [s for _, s in chosen]))
            deadline = time.monotonic() + grace_s
            waiting = [s for _, s in chosen if s.pending(stop_ts)]
            while waiting and time.monotonic() < deadline:
                time.sleep(1.0)
                waiting = [s for s in pool.map(refresh_job, waiting) if s.pending(stop_ts)]
    finally:
        api.close()

    for kind, state in chosen:
        agg = kinds[kind]
        slot = jitter_slot_s(state.job)
        if slot is None:
            agg.nominal_only = True
        agg.not_started += state.pending(stop_ts)
        for run in state.runs:
            due = state.due_of(run)
            if due > stop_ts:
                continue
            due_dt = datetime.fromtimestamp(due, timezone.utc)
            agg.first_due = min(agg.first_due or due_dt, due_dt)
            agg.last_due = max(agg.last_due or due_dt, due_dt)
            if run["state"] in IGNORED_STATES:
                agg.skipped_or_cancelled += 1
                continue
            if run["state"] == "dead":
                agg.failed += 1
            started = parse_time(run.get("startedAt"))
            if started is not None:
                agg.lags_s.append(started.timestamp() - due)
    return LagReport(tag, stop, kinds, time.monotonic() - began, api.calls)


# -- request statistics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestRow:
    method: str
    name: str
    requests: int
    failures: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    rps: float


def rows_from_stats(stats: Any) -> list[RequestRow]:
    """Rows from a live ``locust.stats.RequestStats`` (entries sorted by name, then the aggregate)."""

    def row(e: Any, method: str, name: str) -> RequestRow:
        return RequestRow(
            method,
            name,
            e.num_requests,
            e.num_failures,
            e.get_response_time_percentile(0.5) or 0,
            e.get_response_time_percentile(0.95) or 0,
            e.get_response_time_percentile(0.99) or 0,
            e.max_response_time or 0,
            e.total_rps or 0,
        )

    rows = [row(e, e.method or "", e.name) for e in sorted(stats.entries.values(), key=lambda e: (e.name, e.method))]
    rows.append(row(stats.total, "", "Aggregated"))
    return rows


def rows_from_csv(prefix: str) -> list[RequestRow]:
    """Rows from Locust's ``--csv PREFIX`` output (PREFIX_stats.csv)."""
    rows = []
    with open(f"{prefix}_stats.csv", newline="") as f:
        for r in csv.DictReader(f):
            num = lambda k: float(r.get(k) or 0)  # noqa: E731 - "N/A" never appears in these columns
            rows.append(
                RequestRow(
                    r["Type"],
                    r["Name"],
                    int(num("Request Count")),
                    int(num("Failure Count")),
                    num("50%"),
                    num("95%"),
                    num("99%"),
                    num("Max Response Time"),
                    num("Requests/s"),
                )
            )
    return rows


# -- printing ------------------------------------------------------------------------------------------


def _f(v: float, fmt: str = "{:.3f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def render(lag: LagReport, requests: Iterable[RequestRow], *, title: str = "Kairos load test") -> str:
    out: list[str] = []
    w = 100
    out.append("=" * w)
    out.append(f"{title}  (run tag {lag.tag}; occurrences due before {lag.stop_at.isoformat(timespec='seconds')})")
    out.append("-" * w)
    out.append("Locust requests")
    out.append(
        f"  {'request':<44}{'reqs':>8}{'fails':>7}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}{'req/s':>8}"
    )
    for r in requests:
        label = f"{r.method} {r.name}".strip()[:43]
        out.append(
            f"  {label:<44}{r.requests:>8}{r.failures:>7}{_f(r.p50_ms, '{:.0f}'):>9}"
            f"{_f(r.p95_ms, '{:.0f}'):>9}{_f(r.p99_ms, '{:.0f}'):>9}{_f(r.max_ms, '{:.0f}'):>9}"
            f"{_f(r.rps, '{:.1f}'):>8}"
        )
    out.append("-" * w)
    out.append("Start lag read back from Kairos (startedAt - due time, seconds)")
    out.append(
        f"  {'kind':<34}{'jobs':>6}{'sampled':>8}{'started':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}"
        f"{'<=2s':>7}{'late!':>6}"
    )
    for kind, agg in lag.kinds.items():
        s = agg.summary()
        if not agg.jobs:
            continue
        label = KINDS[kind] + (" *" if agg.nominal_only else "")
        out.append(
            f"  {label:<34}{s['jobs']:>6}{s['sampled']:>8}{s['started']:>8}{_f(s['p50_s']):>8}"
            f"{_f(s['p90_s']):>8}{_f(s['p99_s']):>8}{_f(s['max_s']):>8}"
            f"{_f(s['within_2s'] * 100, '{:.0f}%'):>7}{s['not_started']:>6}"
        )
    o = lag.overall()
    out.append(
        f"  {'all':<34}{o['jobs']:>6}{o['sampled']:>8}{o['started']:>8}{_f(o['p50_s']):>8}"
        f"{_f(o['p90_s']):>8}{_f(o['p99_s']):>8}{_f(o['max_s']):>8}"
        f"{_f(o['within_2s'] * 100, '{:.0f}%'):>7}{o['not_started']:>6}"
    )
    herd = lag.kinds.get("herd")
    if herd and herd.lags_s and herd.first_due:
        out.append(
            f"  herd: {len(herd.lags_s)} started, T = {herd.first_due.isoformat(timespec='seconds')}, "
            f"last start T+{max(herd.lags_s):.3f} s"
        )
    if any(a.nominal_only for a in lag.kinds.values()):
        out.append("  * jitter slot unknown (app.domain not importable): lag measured from the nominal time")
    out.append(
        f"  skipped/cancelled occurrences {o['skipped_or_cancelled']}, dead {o['dead']}, "
        f"late! = due before the stop and not started {lag.not_started}; "
        f"report took {lag.elapsed_s:.1f} s, {lag.requests} REST calls"
    )
    out.append("=" * w)
    return "\n".join(out)


def to_json(lag: LagReport, requests: Iterable[RequestRow]) -> dict[str, Any]:
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and math.isnan(v) else v

    return {
        "tag": lag.tag,
        "stopAt": lag.stop_at.isoformat(),
        "notStarted": lag.not_started,
        "lag": {k: {kk: clean(vv) for kk, vv in a.summary().items()} for k, a in lag.kinds.items()},
        "all": {k: clean(v) for k, v in lag.overall().items()},
        "requests": [r.__dict__ for r in requests],
    }


def report_for_environment(
    environment: Any,
    *,
    host: str,
    keys: Sequence[str],
    tag: str,
    stop_at: datetime | None,
    grace_s: float,
    sample: int,
    json_path: str | None = None,
) -> LagReport:
    """Called from the locustfile's quitting listener: print the report, set the exit code on late starts."""
    lag = collect(host, keys, tag, stop_at=stop_at, grace_s=grace_s, sample=sample)
    rows = rows_from_stats(environment.stats)
    print(render(lag, rows), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(to_json(lag, rows), indent=2, default=str))
    if lag.not_started and environment.process_exit_code is None:
        environment.process_exit_code = 1
    return lag


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", required=True, help="Kairos API base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--tag", required=True, help="the run tag the locustfile printed (job names lt-<tag>-<kind>)")
    p.add_argument("--key", action="append", default=[], help="a tenant API key (repeat for each tenant)")
    p.add_argument("--tenants-file", help="JSON list (or JSON lines) of objects with an apiKey")
    p.add_argument("--csv", dest="csv_prefix", help="Locust --csv prefix, for the request table")
    p.add_argument("--stop-at", help="ignore occurrences due after this ISO time (default now)")
    p.add_argument("--grace", type=float, default=0.0, help="seconds to wait for due occurrences to start")
    p.add_argument("--sample", type=int, default=1500, help="at most this many jobs are inspected")
    p.add_argument("--json", dest="json_path", help="also write the figures as JSON here")
    a = p.parse_args(argv)
    keys = list(a.key)
    if a.tenants_file:
        keys += [t["apiKey"] for t in read_tenants_file(a.tenants_file)]
    if not keys:
        p.error("give --key or --tenants-file")
    lag = collect(a.host, keys, a.tag, stop_at=parse_time(a.stop_at), grace_s=a.grace, sample=a.sample)
    rows = rows_from_csv(a.csv_prefix) if a.csv_prefix else []
    print(render(lag, rows))
    if a.json_path:
        Path(a.json_path).write_text(json.dumps(to_json(lag, rows), indent=2, default=str))
    return 1 if lag.not_started else 0


def read_tenants_file(path: str) -> list[dict[str, Any]]:
    """A JSON list of tenant objects, or JSON lines as `kairos tenants create NAME --json` prints them."""
    text = Path(path).read_text().strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main())
