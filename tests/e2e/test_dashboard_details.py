"""The dashboard's details in a real browser (headless Chromium via selenium) against a `kairos api`: an empty
queue-depth chart draws no axes, only its sentence; the jobs table's Target column says each target once
(a URL, or the pool), and an every schedule reads as one, with its zone and an overlap policy other than allow.
The jobs list filters by a label selector; a job's details name its labels, an HTTP target's identity token and
its audience, and a buffer_one occurrence waiting. Screenshots are kept in tmp_path."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ApiProcess, make_tenant, query, running_api

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (dev extras) drives the browser")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def api(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    with running_api(module_database_url, tmp_path_factory) as (process, _log):
        yield process


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
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_an_empty_queue_chart_has_no_axes_and_targets_are_said_once(
    api: ApiProcess, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    tenant = make_tenant(api.database_url)
    client = httpx.Client(base_url=api.url, headers=tenant.headers, timeout=10)
    for body in (
        {
            "name": "hook",
            "target": {"type": "http", "ref": "https://example.com/hook"},
            "schedule": {"delaySeconds": 3600},
        },
        {"name": "digest", "target": {"type": "queue", "ref": "emails"}, "schedule": {"every": "15m"}},
        {
            "name": "nightly",
            "target": {"type": "queue", "ref": "reports"},
            "schedule": {"every": "1d", "tz": "Europe/London"},
            "concurrency": "buffer_one",
        },
    ):
        assert client.post("/v1/jobs", json=body).status_code == 201
    browser.get(f"{api.url}/dashboard")
    browser.find_element(By.ID, "token").send_keys(tenant.key)
    browser.find_element(By.ID, "sign-in").click()
    wait = WebDriverWait(browser, 20)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")) == 3)
    wait.until(lambda d: d.find_element(By.ID, "empty-queues").is_displayed())
    browser.save_screenshot(str(tmp_path / "dashboard.png"))  # kept whatever follows

    # No job has ready or leased work: the chart keeps its sentence and draws no axis, tick or grid line.
    queues = browser.find_element(By.ID, "chart-queues")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-queues .xtick, #chart-queues .ytick") == []
    assert queues.text.strip() == ""
    rows = {
        r.find_elements(By.TAG_NAME, "td")[0].text: [c.text for c in r.find_elements(By.TAG_NAME, "td")]
        for r in browser.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")
    }
    assert rows["hook"][3] == "https://example.com/hook"
    assert rows["digest"][3] == "pool emails"
    assert rows["digest"][2] == "every 15m"
    # A zoned interval names its zone, and an overlap policy other than allow is said beside the schedule.
    assert rows["nightly"][2] == "every 1d (Europe/London) · overlap buffer_one"


def test_jobs_filter_by_label_selector_and_details_show_labels_auth_and_a_buffered_occurrence(
    api: ApiProcess, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    tenant = make_tenant(api.database_url)
    client = httpx.Client(base_url=api.url, headers=tenant.headers, timeout=10)
    made: dict[str, str] = {}
    for body in (
        {
            "name": "hook",
            "target": {"type": "http", "ref": "https://example.com/hook", "auth": {"type": "oidc"}},
            "schedule": {"delaySeconds": 3600},
            "labels": {"team": "growth", "env": "prod"},
        },
        {
            "name": "signed",
            "target": {
                "type": "http",
                "ref": "https://example.com/signed",
                "auth": {"type": "oidc", "audience": "https://hooks.example"},
            },
            "schedule": {"delaySeconds": 3600},
            "labels": {"team": "billing"},
        },
        {
            "name": "nightly",
            "target": {"type": "queue", "ref": "reports"},
            "schedule": {"every": "1d", "tz": "Europe/London"},
            "concurrency": "buffer_one",
            "labels": {"team": "ops"},
        },
    ):
        answer = client.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        made[body["name"]] = answer.json()["jobId"]
    # An occurrence waiting for the running one (the scheduler would write it; no scheduler runs here).
    waiting = "UPDATE jobs SET buffered_at = '2030-01-01T09:00:00Z' WHERE job_id = %s"
    query(api.database_url, waiting, (made["nightly"],))
    browser.get(f"{api.url}/dashboard")
    browser.find_element(By.ID, "token").send_keys(tenant.key)
    browser.find_element(By.ID, "sign-in").click()
    wait = WebDriverWait(browser, 20)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")) == 3)

    def shown() -> set[str | None]:
        return {r.get_attribute("data-job-id") for r in browser.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")}

    def listed(selector: str, *names: str) -> None:
        box = browser.find_element(By.ID, "filter-label")
        box.clear()
        box.send_keys(selector)
        browser.find_element(By.CSS_SELECTOR, "#job-filters button[type=submit]").click()
        wanted = {made[n] for n in names}
        wait.until(lambda _: shown() == wanted)

    def details(name: str, needle: str) -> str:
        browser.find_element(By.CSS_SELECTOR, f'#jobs-table tbody tr[data-job-id="{made[name]}"]').click()
        wait.until(lambda d: needle in d.find_element(By.ID, "job-facts").text)
        return str(browser.find_element(By.ID, "job-facts").text)

    listed("env!=prod", "signed", "nightly")  # a job without env is not env=prod
    listed("team:ops", "nightly")
    listed("!env", "signed", "nightly")
    nightly = details("nightly", "waits")
    assert "The occurrence due 2030-01-01 " in nightly and "buffer_one" in nightly
    assert "Labels team=ops" in nightly and "identity token" not in nightly
    browser.save_screenshot(str(tmp_path / "buffered.png"))

    listed("team in (growth,billing)", "hook", "signed")
    hook = details("hook", "identity token")
    assert "OIDC identity token, audience https://example.com/hook (the URL)" in hook
    assert "Labels env=prod team=growth" in hook and "waits" not in hook
    signed = details("signed", "hooks.example")
    assert "OIDC identity token, audience https://hooks.example" in signed and "(the URL)" not in signed
    browser.save_screenshot(str(tmp_path / "details.png"))

    # A selector the API cannot read is said where the jobs would be, with the API's reason.
    box = browser.find_element(By.ID, "filter-label")
    box.clear()
    box.send_keys("team in growth")
    browser.find_element(By.CSS_SELECTOR, "#job-filters button[type=submit]").click()
    wait.until(lambda d: d.find_element(By.ID, "jobs-empty").is_displayed())
    assert browser.find_element(By.ID, "jobs-empty").text.startswith("Could not list jobs:")
    assert browser.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr") == []
