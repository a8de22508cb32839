"""The dashboard's job details in a real browser: how a job ends (pause on failure, runs left, removal), why
Kairos paused it, and which dead letter of its history did. A screenshot is kept in tmp_path."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ApiProcess, make_tenant, query
from tests.e2e.test_dashboard_details import By, WebDriverWait, api, browser, webdriver  # noqa: F401

pytestmark = pytest.mark.slow


def test_job_details_say_how_the_job_ends_and_which_dead_letter_paused_it(
    api: ApiProcess,  # noqa: F811
    browser: webdriver.Chrome,  # noqa: F811
    tmp_path: Path,
) -> None:
    tenant = make_tenant(api.database_url)
    client = httpx.Client(base_url=api.url, headers=tenant.headers, timeout=10)
    body = {
        "name": "sync",
        "target": {"type": "queue", "ref": "p"},
        "schedule": {"every": "15m"},
        "pauseOnFailure": True,
        "maxRuns": 4,
        "deleteAfterCompletionSeconds": 86400,
    }
    job_id = client.post("/v1/jobs", json=body).json()["jobId"]
    query(
        api.database_url,
        """INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                   finished_at, error)
           SELECT job_id, tenant_id, queue, now() - interval '1 hour', 1, 1, 'dead', now(), now(), 'HTTP 500'
           FROM jobs WHERE job_id = %s""",
        (job_id,),
    )
    query(
        api.database_url,
        "UPDATE jobs SET state = 'paused', paused_at = now(), next_run_at = NULL, run_count = 1, "
        "pause_execution_id = (SELECT execution_id FROM executions WHERE job_id = jobs.job_id), "
        "paused_reason = 'pauseOnFailure: execution e1 was dead-lettered after 1 attempt: HTTP 500' WHERE job_id = %s",
        (job_id,),
    )
    browser.get(f"{api.url}/dashboard")
    browser.find_element(By.ID, "token").send_keys(tenant.key)
    browser.find_element(By.ID, "sign-in").click()
    wait = WebDriverWait(browser, 20)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")) == 1)
    browser.find_element(By.CSS_SELECTOR, "#jobs-table tbody tr").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#executions-table tbody tr")) == 1)
    browser.save_screenshot(str(tmp_path / "dashboard.png"))
    facts = browser.find_element(By.ID, "job-facts").text
    assert "Paused by Kairos: pauseOnFailure: execution e1 was dead-lettered" in facts
    assert "3 of 4 runs left" in facts and "removed to the archive 1d after it finishes" in facts
    [row] = browser.find_elements(By.CSS_SELECTOR, "#executions-table tbody tr")
    assert "paused the job" in row.find_elements(By.TAG_NAME, "td")[1].text
