"""Locust users for the Kairos REST API, and a herd LoadTestShape.

    locust -f loadtest/locustfile.py -H http://127.0.0.1:8080 --headless -u 20 -r 5 -t 90s
    KAIROS_LOCUST_SHAPE=herd locust -f loadtest/locustfile.py -H http://127.0.0.1:8080 --headless -u 50 -r 10

(`loadtest/run_locust.py` starts a throwaway `kairos up --demo` and runs this for you.)

Tenants. Before the test starts (``init``), every simulated user gets a tenant API key from, in
this order: KAIROS_LOCUST_TENANTS_FILE (a JSON list, or JSON lines as printed by
`kairos tenants create NAME --json`); else KAIROS_LOCUST_TENANTS (default 4) fresh tenants made
with that CLI from this same venv, pointed at the same KAIROS_HOME / KAIROS_DATABASE_URL as the
server (only when that database is visible from here); else KAIROS_API_KEY or the demo tenant's
key in KAIROS_HOME/demo.key. Distributed runs (--master/--worker) need the tenants file.

Targets (KAIROS_LOCUST_TARGET). ``auto`` (default): the API's own ``POST /demo/echo`` when it
answers (`kairos up --demo`, which also allow-lists 127.0.0.1 for HTTP egress), otherwise the
queue pool ``locust`` (serve it with `kairos worker --pool locust -- true`). Also ``demo``,
``queue:POOL`` or ``http:URL``.

Users.
- ``KairosTenant`` (the default mix): lists its jobs, inspects one job and its executions,
  submits one-off jobs (runAt at the next round minute, delaySeconds), cron jobs firing every
  minute (some with jitterSeconds), pauses/resumes cron jobs and cancels a few jobs.
- ``HerdTenant`` with ``HerdShape`` (KAIROS_LOCUST_SHAPE=herd): ramp to -u users at -r per second,
  every user submits KAIROS_LOCUST_HERD_JOBS jobs due at the same round minute T (the first one at
  least KAIROS_LOCUST_HERD_LEAD_S after the ramp), then holds, lightly polling, until
  T + KAIROS_LOCUST_HERD_HOLD_S, and the shape ends the test.

At the end (``quitting``) ``locust_report.py`` reads the start lag of the run's jobs back from
Kairos and prints it beside Locust's request statistics; KAIROS_LOCUST_REPORT_JSON also writes it
as JSON, KAIROS_LOCUST_REPORT_GRACE_S (default 10) bounds the wait for due jobs to start and
KAIROS_LOCUST_REPORT_SAMPLE (default 1500) caps how many jobs are inspected.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import secrets
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from locust import FastHttpUser, LoadTestShape, between, events, task
from locust.runners import MasterRunner, WorkerRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locust_report

log = logging.getLogger("kairos.locust")
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per set-up and report call otherwise


def _env(name: str, default: str) -> str:
    return os.environ.get(f"KAIROS_LOCUST_{name}", default)


SHAPE = _env("SHAPE", "mixed")
HERD = SHAPE == "herd"
MAX_DELAY_S = float(_env("MAX_DELAY_S", "30"))
ROUND_MINUTE_LEAD_S = float(_env("ROUND_MINUTE_LEAD_S", "5"))
JITTER_MAX_S = int(_env("JITTER_MAX_S", "30"))
WAIT_MIN_S, WAIT_MAX_S = (float(v) for v in _env("WAIT", "0.5,1.5").split(","))


@dataclass
class Tenant:
    name: str
    api_key: str


@dataclass
class RunContext:
    """What every user of this process shares: the run tag, the tenants, the job target."""

    tag: str
    tenants: list[Tenant]
    target: dict[str, str]
    host: str
    stop_at: datetime | None = None
    herd_at: float | None = None  # epoch seconds of the herd's T
    next_tenant: int = 0
    created: dict[str, int] = field(default_factory=dict)

    def tenant(self) -> Tenant:
        t = self.tenants[self.next_tenant % len(self.tenants)]
        self.next_tenant += 1
        return t


CTX: RunContext | None = None


def round_minute_after(ts: float, lead_s: float) -> float:
    """The first whole UTC minute at least ``lead_s`` after ``ts`` (epoch seconds)."""
    return math.ceil((ts + lead_s) / 60.0) * 60.0


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


# -- set-up: tenants and target ---------------------------------------------------------------------


def _kairos_cli() -> list[str]:
    script = Path(sys.executable).with_name("kairos")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def _kairos_home() -> Path:
    return Path(os.environ.get("KAIROS_HOME", ".kairos")).resolve()


def create_tenants(tag: str, count: int) -> list[Tenant]:
    """`kairos tenants create lt-<tag>-tN --json`, all at once, against the server's own database."""
    procs = [
        (
            f"lt-{tag}-t{i}",
            subprocess.Popen(
                [*_kairos_cli(), "tenants", "create", f"lt-{tag}-t{i}", "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for i in range(count)
    ]
    tenants = []
    for name, proc in procs:
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"kairos tenants create {name} failed ({proc.returncode}): {err.strip()[-400:]}")
        line = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
        tenants.append(Tenant(name, json.loads(line)["apiKey"]))
    return tenants


def load_tenants(tag: str, distributed: bool) -> list[Tenant]:
    path = _env("TENANTS_FILE", "")
    if path:
        return [
            Tenant(t.get("name", f"tenant{i}"), t["apiKey"])
            for i, t in enumerate(locust_report.read_tenants_file(path))
        ]
    if distributed:
        raise RuntimeError("distributed runs need KAIROS_LOCUST_TENANTS_FILE (the same tenants on every worker)")
    count = int(_env("TENANTS", "4"))
    database_visible = bool(os.environ.get("KAIROS_DATABASE_URL")) or (_kairos_home() / "pgdata").is_dir()
    if count > 0 and database_visible:
        return create_tenants(tag, count)
    key = os.environ.get("KAIROS_API_KEY", "")
    demo_key = _kairos_home() / "demo.key"
    if not key and demo_key.exists():
        key = demo_key.read_text().strip()
    if not key:
        raise RuntimeError(
            "no tenants: set KAIROS_LOCUST_TENANTS_FILE, or KAIROS_HOME / KAIROS_DATABASE_URL of the "
            "server (tenants are created with `kairos tenants create`), or KAIROS_API_KEY"
        )
    log.warning("using one existing tenant key for every user (KAIROS_API_KEY or demo.key)")
    return [Tenant("existing", key)]


def choose_target(host: str) -> dict[str, str]:
    wanted = _env("TARGET", "auto")
    demo = {"type": "http", "ref": f"{host.rstrip('/')}/demo/echo"}
    if wanted == "demo":
        return demo
    if wanted.startswith("queue:"):
        return {"type": "queue", "ref": wanted.removeprefix("queue:")}
    if wanted.startswith("http:"):
        return {"type": "http", "ref": wanted.removeprefix("http:")}
    try:
        answered = httpx.post(demo["ref"], content=b"{}", timeout=5).status_code == 200
    except httpx.HTTPError:
        answered = False
    if answered:
        return demo
    log.warning(
        "the API has no /demo/echo; jobs target the queue pool 'locust': serve it with "
        "`kairos worker --pool locust -- true` or their start lag stays empty"
    )
    return {"type": "queue", "ref": "locust"}


def check_keys(host: str, tenants: list[Tenant]) -> None:
    for t in tenants:
        r = httpx.get(
            f"{host.rstrip('/')}/v1/jobs",
            params={"limit": 1},
            headers={"Authorization": f"Bearer {t.api_key}"},
            timeout=10,
        )
        if r.status_code != 200:
            raise RuntimeError(f"tenant {t.name}: GET /v1/jobs answered {r.status_code}: {r.text[:200]}")


@events.init.add_listener
def on_init(environment: Any, **_: Any) -> None:
    global CTX
    host = environment.host or (environment.parsed_options and environment.parsed_options.host)
    if not host:
        log.error("give the Kairos API with -H, e.g. -H http://127.0.0.1:8080")
        sys.exit(2)
    tag = _env("RUN_TAG", "") or secrets.token_hex(3)
    distributed = isinstance(environment.runner, (MasterRunner, WorkerRunner))
    try:
        tenants = load_tenants(tag, distributed)
        check_keys(host, tenants)
        target = choose_target(host)
    except (RuntimeError, httpx.HTTPError, subprocess.TimeoutExpired) as exc:
        log.error("kairos load test set-up failed: %s", exc)
        sys.exit(2)
    CTX = RunContext(tag=tag, tenants=tenants, target=target, host=host)
    herd_at = _env("HERD_AT", "")
    if herd_at:
        CTX.herd_at = datetime.fromisoformat(herd_at.replace("Z", "+00:00")).timestamp()
    log.info(
        "kairos load test: run tag %s, %d tenant(s), target %s %s, shape %s",
        tag,
        len(tenants),
        target["type"],
        target["ref"],
        SHAPE,
    )


@events.test_stop.add_listener
def on_test_stop(environment: Any, **_: Any) -> None:
    if CTX is not None:
        CTX.stop_at = datetime.now(timezone.utc)


@events.quitting.add_listener
def on_quitting(environment: Any, **_: Any) -> None:
    if CTX is None or isinstance(environment.runner, WorkerRunner):
        return
    try:
        locust_report.report_for_environment(
            environment,
            host=CTX.host,
            keys=[t.api_key for t in CTX.tenants],
            tag=CTX.tag,
            stop_at=CTX.stop_at,
            grace_s=float(_env("REPORT_GRACE_S", "10")),
            sample=int(_env("REPORT_SAMPLE", "1500")),
            json_path=_env("REPORT_JSON", "") or None,
        )
    except Exception:  # the report must not hide Locust's own statistics
        log.exception("the start-lag report failed")
        if environment.process_exit_code is None:
            environment.process_exit_code = 1


# -- users ----------------------------------------------------------------------------------------


@dataclass
class OwnJob:
    job_id: str
    kind: str
    paused: bool = False


class KairosUser(FastHttpUser):
    """A tenant's client: its API key, the jobs it created, helpers for the calls."""

    abstract = True
    connection_timeout = 10.0
    network_timeout = 30.0

    def on_start(self) -> None:
        assert CTX is not None, "the init listener did not run"
        self.ctx = CTX
        self.tenant = CTX.tenant()
        self.headers = {"Authorization": f"Bearer {self.tenant.api_key}"}
        self.jobs: list[OwnJob] = []
        self.seq = 0

    def submit(self, kind: str, schedule: dict[str, Any], label: str) -> OwnJob | None:
        self.seq += 1
        body = {
            "name": locust_report.job_name(self.ctx.tag, kind),
            "target": self.ctx.target,
            "payload": {"tenant": self.tenant.name, "seq": self.seq},
            "schedule": schedule,
        }
        headers = {**self.headers, "Idempotency-Key": str(uuid.uuid4())}
        with self.client.post(
            "/v1/jobs", json=body, headers=headers, name=f"/v1/jobs [{label}]", catch_response=True
        ) as r:
            if r.status_code != 201:
                r.failure(f"{r.status_code}: {(r.text or '')[:200]}")
                return None
            job = OwnJob(r.json()["jobId"], kind)
        self.ctx.created[kind] = self.ctx.created.get(kind, 0) + 1
        self.jobs.append(job)
        return job

    def expect(self, method: str, path: str, name: str, status: int, **kw: Any) -> Any:
        with self.client.request(method, path, headers=self.headers, name=name, catch_response=True, **kw) as r:
            if r.status_code != status:
                r.failure(f"{r.status_code}: {(r.text or '')[:200]}")
                return None
            return r.json() if r.text else {}

    def pick(self, *kinds: str, paused: bool | None = None) -> OwnJob | None:
        found = [j for j in self.jobs if (not kinds or j.kind in kinds) and (paused is None or j.paused == paused)]
        return random.choice(found) if found else None


class KairosTenant(KairosUser):
    """The everyday mix: reads dominate, submits come next, pause/resume and cancel are rare."""

    abstract = HERD
    wait_time = between(WAIT_MIN_S, WAIT_MAX_S)

    def on_start(self) -> None:
        super().on_start()
        self.submit_delay()

    @task(10)
    def list_jobs(self) -> None:
        self.expect("GET", "/v1/jobs?limit=20", "/v1/jobs", 200)

    @task(8)
    def get_job(self) -> None:
        if job := self.pick():
            self.expect("GET", f"/v1/jobs/{job.job_id}", "/v1/jobs/{id}", 200)

    @task(6)
    def job_executions(self) -> None:
        if job := self.pick():
            self.expect("GET", f"/v1/jobs/{job.job_id}/executions", "/v1/jobs/{id}/executions", 200)

    @task(6)
    def submit_delay(self) -> None:
        self.submit("once-delay", {"delaySeconds": round(random.uniform(1, MAX_DELAY_S), 1)}, "delaySeconds")

    @task(4)
    def submit_round_minute(self) -> None:
        at = round_minute_after(time.time(), ROUND_MINUTE_LEAD_S)
        self.submit("once-at", {"runAt": iso(at)}, "runAt")

    @task(2)
    def submit_cron(self) -> None:
        self.submit(
            "cron", {"cron": "* * * * *", "tz": random.choice(["UTC", "Europe/London", "Asia/Kolkata"])}, "cron"
        )

    @task(2)
    def submit_cron_jitter(self) -> None:
        self.submit(
            "cron-jitter",
            {"cron": "* * * * *", "tz": "UTC", "jitterSeconds": random.randint(5, JITTER_MAX_S)},
            "cron+jitter",
        )

    @task(1)
    def pause_or_resume(self) -> None:
        if job := self.pick("cron", "cron-jitter", paused=True):
            if (
                self.expect(
                    "POST", f"/v1/jobs/{job.job_id}:resume", "/v1/jobs/{id}:resume", 200, json={"missed": "skip"}
                )
                is not None
            ):
                job.paused = False
        elif job := self.pick("cron", "cron-jitter", paused=False):
            if self.expect("POST", f"/v1/jobs/{job.job_id}:pause", "/v1/jobs/{id}:pause", 200) is not None:
                job.paused = True

    @task(1)
    def cancel(self) -> None:
        # Mostly cron jobs (they would fire for ever); now and then a one-off before it is due.
        job = self.pick("cron", "cron-jitter") if random.random() < 0.7 else self.pick("once-at")
        if job and self.expect("DELETE", f"/v1/jobs/{job.job_id}", "/v1/jobs/{id}", 204) is not None:
            self.jobs.remove(job)


class HerdTenant(KairosUser):
    """Submits its share of the herd due at T, then holds (a light poll every few seconds)."""

    abstract = not HERD
    herd_jobs = int(_env("HERD_JOBS", "20"))

    def on_start(self) -> None:
        super().on_start()
        if self.ctx.herd_at is None:  # a worker process without the shape: its own T
            self.ctx.herd_at = round_minute_after(time.time(), float(_env("HERD_LEAD_S", "10")))
        self.to_submit = self.herd_jobs
        if time.time() > self.ctx.herd_at - 1.0:
            log.warning("user started %.1f s before T: too late to join the herd", self.ctx.herd_at - time.time())
            self.to_submit = 0

    def wait_time(self) -> float:
        return 0.0 if self.to_submit else random.uniform(2.0, 4.0)

    @task
    def herd(self) -> None:
        if self.to_submit and time.time() < (self.ctx.herd_at or 0) - 1.0:
            self.to_submit -= 1
            self.submit("herd", {"runAt": iso(self.ctx.herd_at or 0)}, "runAt herd")
            return
        self.to_submit = 0
        if (job := self.pick()) and time.time() > (self.ctx.herd_at or 0):
            self.expect("GET", f"/v1/jobs/{job.job_id}/executions", "/v1/jobs/{id}/executions", 200)
        else:
            self.expect("GET", "/v1/jobs?limit=20", "/v1/jobs", 200)


class HerdShape(LoadTestShape):
    """Ramp to -u users at -r/s, submit the herd for the round minute T, hold until T + hold, stop."""

    abstract = not HERD
    use_common_options = True  # reads -u and -r; -t stays a hard upper bound

    def __init__(self) -> None:
        super().__init__()
        self.users = 0
        self.rate = 0.0
        self.end_run_time: float | None = None

    def tick(self) -> tuple[int, float, list[type[KairosUser]]] | None:
        if self.end_run_time is None:
            opts = self.runner.environment.parsed_options if self.runner else None
            self.users = int(getattr(opts, "num_users", None) or 20)
            self.rate = float(getattr(opts, "spawn_rate", None) or 10)
            ramp_s = self.users / self.rate
            now = time.time()
            assert CTX is not None
            if CTX.herd_at is None:
                CTX.herd_at = round_minute_after(now + ramp_s, float(_env("HERD_LEAD_S", "10")))
            hold_s = float(_env("HERD_HOLD_S", "20"))
            self.end_run_time = self.get_run_time() + (CTX.herd_at - now) + hold_s
            log.info(
                "herd: %d users x %d jobs due at %s, holding until T+%.0f s (%.0f s from now)",
                self.users,
                HerdTenant.herd_jobs,
                iso(CTX.herd_at),
                hold_s,
                self.end_run_time - self.get_run_time(),
            )
        if self.get_run_time() > self.end_run_time:
            return None
        return self.users, self.rate, [HerdTenant]
