"""The dashboard in a real browser (headless Chromium via selenium) against `kairos up --demo`.

Jobs really run: HTTP jobs to the demo echo target, queue jobs through `kairos worker` (one dead
at once, one retried until dead), a backlog nobody serves, a herd of cron jobs at the top of the
hour, and one job that runs twice: its first worker (the SDK client, as a real worker would)
lets its lease run out, the executor's reaper hands the execution to a second worker, and the
first one reports late. The page must show charts with those numbers, the job list, and that
job's history with the sentence that says why it ran twice. A screenshot is kept in tmp_path.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import KairosUp, kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ADMIN_TOKEN = "operator-" + uuid.uuid4().hex
# The worker's command: the payload on stdin decides (65 dead-letters at once, 1 retries).
WORKER_COMMAND = 'p=$(cat); case "$p" in *boom*) exit 65;; *flaky*) exit 1;; esac; printf %s "$p"'

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (dev extras) drives the browser")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,1320",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def submit(api: httpx.Client, name: str, target: dict, payload: object = None, **more: object) -> str:
    body = {"name": name, "target": target, "payload": payload or {}, "schedule": {"delaySeconds": 1}, **more}
    resp = api.post("/v1/jobs", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()["jobId"]


def last_state(api: httpx.Client, job_id: str) -> str | None:
    history = api.get(f"/v1/jobs/{job_id}/executions").json()
    return history[0]["state"] if history else None


async def run_twice(up: KairosUp) -> None:
    """Lease nightly-export as one worker and go quiet; lease it again as another once the reaper
    has handed it back; complete it; then let the first worker report late (LEASE_LOST)."""
    from kairos_sdk.client import WorkerClient

    async with WorkerClient(up.grpc_addr, up.key) as client:
        [first] = await client.lease("manual", "laptop-7f3a", lease_seconds=1, wait_seconds=20)
        second: list = []
        while not second:  # the reaper runs every second; the lease ran out a second after it began
            second = await client.lease("manual", "worker-b", lease_seconds=30, wait_seconds=5)
        [again] = second
        assert (again.execution_id, again.attempt) == (first.execution_id, first.attempt + 1)
        assert (await client.complete(again.execution_id, again.attempt, {"rows": 1200})).outcome == "ok"
        assert (await client.complete(first.execution_id, first.attempt, {"rows": 1200})).lease_lost


def make_work(up: KairosUp, api: httpx.Client) -> dict[str, str]:
    # The herd first, so the jobs that run are the newest: the first page of the list.
    herd = [
        {
            "name": f"hourly-{i}",
            "target": {"type": "queue", "ref": "reports"},
            "payload": {},
            "schedule": {"cron": "0 * * * *", "tz": "UTC"},
        }
        for i in range(40)
    ]
    herd += [
        {
            "name": f"quarterly-{i}",
            "target": {"type": "queue", "ref": "reports"},
            "payload": {},
            "schedule": {"cron": "*/15 * * * *", "tz": "UTC"},
        }
        for i in range(10)
    ]
    resp = api.post("/v1/jobs:batch", json={"jobs": herd})
    assert resp.status_code == 200 and all("jobId" in r for r in resp.json()["results"]), resp.text
    jobs: dict[str, str] = {}
    for i in range(8):
        jobs[f"echo-{i}"] = submit(
            api,
            f"echo-{i}",
            {"type": "http", "ref": f"{up.api}/demo/echo"},
            {"n": i},
            schedule={"delaySeconds": 1 + i % 3},
        )
    for i in range(6):
        jobs[f"mail-{i}"] = submit(api, f"mail-{i}", {"type": "queue", "ref": "mail"}, {"to": f"u{i}@example.com"})
    jobs["bounce"] = submit(api, "bounce", {"type": "queue", "ref": "mail"}, {"mode": "boom"})
    jobs["flaky-sync"] = submit(
        api,
        "flaky-sync",
        {"type": "queue", "ref": "mail"},
        {"mode": "flaky"},
        retry={"maxAttempts": 2, "backoffSeconds": 1},
    )
    jobs["nightly-export"] = submit(api, "nightly-export", {"type": "queue", "ref": "manual"}, {"day": "today"})
    for i in range(3):
        submit(api, f"backlog-{i}", {"type": "queue", "ref": "reports"})
    return jobs


def js(driver: webdriver.Chrome, script: str) -> object:
    return driver.execute_script(script)


def count(driver: webdriver.Chrome, selector: str) -> int:
    return int(js(driver, f"return document.querySelectorAll({selector!r}).length"))  # type: ignore[arg-type]


def text(driver: webdriver.Chrome, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def test_the_dashboard_shows_real_figures_and_why_a_job_ran_twice(tmp_path: Path, browser: webdriver.Chrome) -> None:
    worker = None
    with kairos_up(tmp_path, "--demo", KAIROS_ADMIN_TOKEN=ADMIN_TOKEN) as up:
        try:
            with open(tmp_path / "worker.log", "wb") as sink:
                worker = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "app.cli",
                        "worker",
                        "--pool",
                        "mail",
                        "--report-ms",
                        "2",
                        "--",
                        "sh",
                        "-c",
                        WORKER_COMMAND,
                    ],
                    env={**up.env, "KAIROS_API_KEY": up.key, "KAIROS_GRPC_ADDR": up.grpc_addr},
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as api:
                jobs = make_work(up, api)
                asyncio.run(asyncio.wait_for(run_twice(up), timeout=60))
                expected = dict.fromkeys(jobs, "succeeded") | {"bounce": "dead", "flaky-sync": "dead"}
                wait_for(
                    lambda: all(last_state(api, jobs[n]) == s for n, s in expected.items()),
                    timeout_s=60,
                    interval_s=0.3,
                    what="every job to finish",
                )
            check_dashboard(browser, up, tmp_path)
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=20)


def check_dashboard(driver: webdriver.Chrome, up: KairosUp, tmp_path: Path) -> None:
    wait = WebDriverWait(driver, 30, poll_frequency=0.2)
    driver.get(f"{up.api}/dashboard")
    driver.find_element(By.ID, "token").send_keys(up.key)
    driver.find_element(By.ID, "sign-in").click()
    wait.until(lambda d: d.find_element(By.ID, "board").is_displayed())
    assert text(driver, "scope-badge") == "tenant · demo"

    # Charts drawn from real data: line points, bars, and numbers in the tiles.
    wait.until(lambda d: count(d, "#chart-lag .scatterlayer .trace .points path") >= 2)
    wait.until(lambda d: count(d, "#chart-outcomes .barlayer .point path") >= 2)
    wait.until(lambda d: count(d, "#chart-queues .barlayer .point path") >= 1)
    wait.until(lambda d: count(d, "#chart-due .barlayer .point path") >= 1)
    assert re.fullmatch(r"\d+ ms|\d+\.\d+ s", text(driver, "tile-p50")), text(driver, "tile-p50")
    assert re.fullmatch(r"\d+ ms|\d+\.\d+ s", text(driver, "tile-p99")), text(driver, "tile-p99")
    assert text(driver, "tile-dead") == "2"  # bounce (exit 65) and flaky-sync (out of attempts)
    assert re.fullmatch(r"\d+ / \d+", text(driver, "tile-queued"))
    assert re.fullmatch(r"\d+ / 256", text(driver, "tile-shards"))
    legend = driver.find_element(By.ID, "chart-outcomes").text
    assert "succeeded" in legend and "dead" in legend and "retried" in legend
    assert "reports" in driver.find_element(By.ID, "chart-queues").text  # the backlog nobody serves
    hint = text(driver, "due-hint")
    # The busiest minute's clock time, with its date when that is not today (the next hour after 23:00).
    busiest = re.search(r"busiest (\d{4}-\d\d-\d\d )?\d\d:\d\d with (\d+)$", hint)
    assert busiest and int(busiest.group(2)) >= 40, hint

    # The jobs list, and the history of the job that ran twice.
    wait.until(lambda d: count(d, "#jobs-table tbody tr") >= 20)
    row = wait.until(
        lambda d: next(
            (
                r
                for r in d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")
                if r.text.startswith("nightly-export")
            ),
            None,
        )
    )
    row.click()
    wait.until(lambda d: count(d, "#executions-table tbody tr") == 1)
    assert "succeeded" in driver.find_element(By.CSS_SELECTOR, "#executions-table tbody tr").text
    driver.find_element(By.CSS_SELECTOR, "#executions-table tbody tr").click()
    wait.until(lambda d: d.find_element(By.ID, "attempts").is_displayed() and text(d, "attempts-story"))
    story = text(driver, "attempts-story")
    assert "attempt 1 lost its lease" in story.lower() and "attempt 2 ran on worker-b" in story, story
    assert "this job ran twice" in story, story
    attempts = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#attempt-list li")]
    assert len(attempts) == 2 and attempts[0].startswith("discarded") and "laptop-7f3a" in attempts[0], attempts
    assert attempts[1].startswith("succeeded"), attempts

    # A shorter window redraws every chart from the API.
    before = text(driver, "updated")
    js(
        driver,
        "const w = document.getElementById('window-picker'); w.value = '15';w.dispatchEvent(new Event('change'))",
    )
    wait.until(lambda d: text(d, "updated") != before and count(d, "#chart-lag .scatterlayer .trace .points path") >= 2)
    js(driver, "window.scrollTo(0, 0)")
    driver.set_window_size(1440, int(js(driver, "return document.documentElement.scrollHeight")) + 140)  # type: ignore[arg-type]
    driver.save_screenshot(str(tmp_path / "dashboard.png"))
    assert (tmp_path / "dashboard.png").stat().st_size > 50_000

    # A filter on the jobs list goes through GET /v1/jobs?state=.
    js(driver, "document.getElementById('filter-state').value = 'failed'")
    driver.find_element(By.CSS_SELECTOR, "#job-filters button").click()
    wait.until(
        lambda d: (
            sorted(r.text.split()[0] for r in d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr"))
            == ["bounce", "flaky-sync"]
        )
    )

    # Everything came from the API's own origin, and the page logged no error (CSP violations included).
    loaded = js(driver, "return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(str(u).startswith(up.api) for u in loaded), loaded  # type: ignore[union-attr]
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors

    # The operator's token sees every tenant and picks one.
    driver.find_element(By.ID, "sign-out").click()
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
    driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
    driver.find_element(By.ID, "sign-in").click()
    wait.until(lambda d: text(d, "scope-badge") == "operator · every tenant")
    assert driver.find_element(By.ID, "jobs-admin-note").is_displayed()
    assert not driver.find_element(By.ID, "jobs-table").is_displayed()  # the tenant's list is gone with its key
    wait.until(lambda d: "demo" in [o.text for o in d.find_elements(By.CSS_SELECTOR, "#tenant-picker option")])
    js(
        driver,
        "const p = document.getElementById('tenant-picker'); p.value = 'demo';p.dispatchEvent(new Event('change'))",
    )
    wait.until(lambda d: text(d, "scope-badge") == "operator · demo")
    wait.until(lambda d: re.fullmatch(r".+: \d+", text(d, "tile-schedulers")))  # owners by name: operator only
    driver.save_screenshot(str(tmp_path / "dashboard-operator.png"))
