"""The dashboard's details in a real browser (headless Chromium via selenium) against a `kairos api`: an empty
queue-depth chart draws no axes, only its sentence; the jobs table's Target column says each target once
(a URL, or the pool), and an every schedule reads as one, with its zone and an overlap policy other than allow.
A screenshot is kept in tmp_path."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ApiProcess, make_tenant, running_api

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
