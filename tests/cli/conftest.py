"""The tenant commands (`kairos jobs`, `dead-letters`, `crontab`) against a real `kairos api` process.

One API process on its own database serves the whole folder; each test gets its own tenant. The
commands run in this process through ``app.cli.run`` (the console entry point, so exit codes and
one-line errors are the real ones) with the environment a shell would give them; a few tests run
``python -m app.cli`` as a child process to see what a terminal sees.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.api.conftest import ApiProcess, TenantKey, make_tenant, running_api
from tests.conftest import free_port, fresh_database


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def error_line(self) -> str:
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"one line on stderr, got: {self.err!r}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


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
def kairos(cli_api: ApiProcess, tenant: TenantKey, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> Kairos:
    """``kairos(*args, stdin=None, env=None)``: run the command line as the tenant; its exit code and output."""
    monkeypatch.setenv("KAIROS_API_URL", cli_api.url)
    monkeypatch.setenv("KAIROS_API_KEY", tenant.key)

    def run(*args: str, stdin: str | None = None, env: dict[str, str | None] | None = None) -> Result:
        from app.cli import run as entry_point

        capsys.readouterr()
        with monkeypatch.context() as scoped:
            scoped.setattr(sys, "argv", ["kairos", *args])
            scoped.setattr(sys, "stdin", io.StringIO(stdin or ""))
            for name, value in (env or {}).items():
                if value is None:
                    scoped.delenv(name, raising=False)
                else:
                    scoped.setenv(name, value)
            try:
                entry_point()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def closed_url() -> str:
    """An address nothing listens on: a command that sent a request there would exit 1, not 2."""
    return f"http://127.0.0.1:{free_port()}"


def child(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app.cli ARGS`` as its own process."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}, **env}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=full, capture_output=True, text=True,
                          timeout=60)


__all__ = ["Kairos", "Result", "TenantKey", "child", "closed_url"]
