"""The tenant commands (`kairos jobs`, `dead-letters`, `crontab`) against a real `kairos api` process.

One API process on its own database serves the whole folder; each test gets its own tenant. The
commands run in this process through ``app.cli.run`` (the console entry point, so exit codes and
one-line errors are the real ones) with the environment a shell would give them; a few tests run
``python -m app.cli`` as a child process to see what a terminal sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.api.conftest import ApiProcess, TenantKey, make_tenant, running_api
from tests.conftest import free_port, fresh_database
from tests.support.cli import Result, child, run_kairos

Kairos = Callable[..., Result]


@pytest.fixture(scope="package")
def cli_database_url(pg_base_url: str, pg_template: str) -> Iterator[str]:
    with fresh_database(pg_base_url, pg_template) as url:
        yield url


@pytest.fixture(scope="package")
def cli_api(cli_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    with running_api(cli_database_url, tmp_path_factory, KAIROS_API_WORKERS="1") as (process, _log):
        yield process


@pytest.fixture
def tenant(cli_api: ApiProcess) -> TenantKey:
    return make_tenant(cli_api.database_url)


@pytest.fixture
def kairos(
    cli_api: ApiProcess, tenant: TenantKey, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Kairos:
    """``kairos(*args, stdin=None, env=None)``: run the command line as the tenant; its exit code and output."""
    monkeypatch.setenv("KAIROS_API_URL", cli_api.url)
    monkeypatch.setenv("KAIROS_API_KEY", tenant.key)

    def run(*args: str, stdin: str | None = None, env: dict[str, str | None] | None = None) -> Result:
        return run_kairos(monkeypatch, capsys, *args, stdin=stdin, env=env)

    return run


def closed_url() -> str:
    """An address nothing listens on: a command that sent a request there would exit 1, not 2."""
    return f"http://127.0.0.1:{free_port()}"


__all__ = ["Kairos", "Result", "TenantKey", "child", "closed_url"]
