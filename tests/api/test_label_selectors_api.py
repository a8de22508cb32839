"""GET /v1/jobs?label= with set-based selectors (in, notin, !=, exists, !key), as Kubernetes reads them, and the
OpenAPI document naming those forms."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess
from tests.api.test_job_management import cron_job


def test_jobs_are_listed_by_label_selectors(api: ApiProcess, client: httpx.Client) -> None:
    made = {
        name: client.post("/v1/jobs", json=cron_job(name=name, labels=labels)).json()["jobId"]
        for name, labels in (
            ("a", {"team": "a", "env": "prod"}),
            ("b", {"team": "b"}),
            ("c", {"team": "c", "env": "dev"}),
            ("none", {}),
        )
    }

    def names(*selectors: str) -> set[str]:
        answer = client.get("/v1/jobs", params=[("label", s) for s in selectors])
        assert answer.status_code == 200, answer.text
        return {j["name"] for j in answer.json()["jobs"]}

    assert names("team in (a,b)") == {"a", "b"}
    assert names("team notin (a,b)") == {"c", "none"}
    assert names("env!=prod") == {"b", "c", "none"}
    assert names("!env") == {"b", "none"}
    assert names("env") == {"a", "c"}
    assert names("team:a") == {"a"} == names("team=a")
    assert names("team in (a,b,c),!env") == {"b"}
    assert names("env", "team notin (c)") == {"a"}
    refused = client.get("/v1/jobs", params={"label": "team in a"})
    assert refused.status_code == 422 and refused.json()["field"] == "label"
    assert len(made) == 4


SELECTOR_FORMS = ("key:value", "key=value", "key!=value", "key in (a,b)", "key notin (a,b)", "!key")


def test_the_document_names_the_selector_forms(api: ApiProcess) -> None:
    document = httpx.get(f"{api.url}/schema/openapi.json", timeout=10).json()
    [label] = [p for p in document["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "label"]
    labels = document["components"]["schemas"]["JobOut"]["properties"]["labels"]
    for described in (label["description"], labels["description"]):
        missing = [form for form in SELECTOR_FORMS if form not in described.replace("'", "")]
        assert missing == [], described
