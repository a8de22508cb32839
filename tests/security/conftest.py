"""Security tests: a real `kairos api` process per module (the fixtures of tests/api), attacked as a client would."""

from __future__ import annotations

from tests.api.conftest import api, client, other_tenant, tenant  # noqa: F401  (fixtures)
