"""The OpenAPI document describes the API as it behaves: schemathesis against a real `kairos api`.

Schemathesis reads the live document (/schema/openapi.json) and, for every operation, sends requests
generated from it with a tenant's key: valid ones (positive) and ones that break the schema
(negative). Every answer must pass schemathesis's OpenAPI checks: no 5xx; only documented status
codes, content types and headers; bodies that match the documented schemas; data the schema forbids
refused; a request with a wrong key refused. On top, every error is application/problem+json.

Data the schema allows must be accepted, except where the rule cannot be written in JSON Schema: a
422 to a positive case must name one of SEMANTIC_FIELDS (cron syntax, zone names, cursors issued by
the API, "exactly one of runAt, delaySeconds, cron or every", ...). Any other 422 means a bound the
document does not state, which is the bug this test is for. Undocumented methods and OPTIONS are
tests/security/test_inputs_http.py's.

Bounded and deterministic: EXAMPLES cases per operation and mode, Hypothesis derandomized (its seed
is fixed by the strategy), no shrinking, no example database, and the whole run must end within
BUDGET_S. Every failure of every operation is reported, not only the first. The API runs with the
failed-authentication throttle off: schemathesis sends wrong keys on purpose, and the throttle's 429
is tests/security/test_auth_rate.py's.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.api.conftest import ApiProcess, make_tenant, running_api
from tests.conftest import fresh_database

EXAMPLES = 10
BUDGET_S = 60.0
PROBLEM = "application/problem+json"
SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
)

# Fields (JSON Pointers into the body, or parameter names) whose rules JSON Schema cannot state: a
# positive case may get a 422 naming one of these (or a field under one of them).
SEMANTIC_FIELDS = (
    "/schedule",  # exactly one of runAt/delaySeconds/cron/every; cron syntax, zone names, horizons, bounds
    "/target",  # a URL for http, a pool name for queue; method and headers for http only
    "/payload",  # size, NUL in strings and keys, depth
    "/retry/maxBackoffSeconds",  # at least backoffSeconds
    "/from",
    "/to",  # a backfill covers the past, from before to
    "cursor",  # one this API issued
    "cron",
    "tz",
    "from",  # preview: as a submit's schedule, and a horizon
    "jobId",  # preview: a cron or every job of the tenant
    "every",
    "startAt",  # preview: an interval such as 15m, and its anchor (an instant, with every only)
    "label",  # a label selector: its grammar is in the parameter's description, not a pattern
    "",  # PATCH: the merged job is validated as a submit
)

# README: "an integer field takes no fraction" (bodies are decoded strictly), which JSON Schema cannot say.
STRICT_INTEGER = "got `float`"


@pytest.fixture(scope="module")
def api(pg_base_url: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    with (
        fresh_database(pg_base_url, pg_template) as database_url,
        running_api(database_url, tmp_path_factory, KAIROS_API_WORKERS="1", KAIROS_AUTH_FAILURE_LIMIT="0") as (
            process,
            _log,
        ),
    ):
        yield process


def _semantic(field: str) -> bool:
    return any(field == f or (f.startswith("/") and field.startswith(f + "/")) for f in SEMANTIC_FIELDS)


def _run(operation: schemathesis.APIOperation, mode: GenerationMode, statuses: Counter[int]) -> None:
    @SETTINGS
    @hypothesis.given(operation.as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        response = case.call_and_validate(timeout=10, excluded_checks=[positive_data_acceptance])
        statuses[response.status_code] += 1
        if response.status_code >= 400:
            content_type = response.headers.get("content-type", [""])[0]
            assert content_type.startswith(PROBLEM), (response.status_code, content_type, response.text[:300])
        if mode is GenerationMode.POSITIVE and response.status_code in (400, 413, 422):
            problem = json.loads(response.text)
            detail = problem.get("detail", "")
            if detail.startswith("Expected `int") and detail.endswith(STRICT_INTEGER):
                return  # 445.0 is an integer to JSON Schema; the API takes integers without a fraction
            assert response.status_code == 422 and _semantic(problem.get("field", "?")), (
                f"schema-valid request refused: {response.status_code} {problem}\n{case.as_curl_command()}"
            )

    check()


def test_the_api_behaves_as_its_document_says(api: ApiProcess) -> None:
    started = time.monotonic()
    key = make_tenant(api.database_url)
    # The tenant's key as the document's bearer scheme: schemathesis sends it, and a wrong one on purpose.
    config = schemathesis.Config.from_dict({"auth": {"openapi": {"bearer": {"bearer": key.key}}}})
    schema = schemathesis.openapi.from_url(f"{api.url}/schema/openapi.json", config=config)
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _run(operation, mode, statuses)
            except Unsatisfiable:
                continue  # nothing to negate (GET /healthz takes no input)
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every operation's findings, then the test fails
                failures.append(f"{operation.label} [{mode}]: {type(exc).__name__}: {str(exc)[:2500]}")
    elapsed = time.monotonic() - started
    assert operations >= 20
    # The key worked: most answers are not 401 (a run that only ever met 401 would prove nothing).
    assert sum(n for code, n in statuses.items() if code < 300) >= operations, statuses
    assert statuses[401] < sum(statuses.values()) / 2, statuses
    assert not failures, "\n\n".join(failures)
    assert elapsed < BUDGET_S, f"schemathesis took {elapsed:.1f} s, past its {BUDGET_S:.0f} s budget"
