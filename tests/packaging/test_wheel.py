"""The wheels are self-contained: built from the checkout, installed into a fresh virtualenv
outside it, they migrate the embedded database and accept a job, with no file of the checkout
in reach (SQL comes from package data, the SDK from its own wheel)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# What a wheel build needs from the checkout; build/ and *.egg-info are left behind so a stale
# build tree cannot put files in the wheel that the sources no longer have.
_NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".kairos",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "tests",
    "loadtest",
)


def _run(*args: str | Path, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the kairos and kairos-sdk wheels and their dependencies; returns its bin/."""
    work = tmp_path_factory.mktemp("wheel")
    source, dist, env_dir = work / "source", work / "dist", work / "venv"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_NOT_SOURCES)
    for project in (source / "sdk" / "python", source):
        _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, project)
    wheels = sorted(dist.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["kairos", "kairos_sdk"]
    with zipfile.ZipFile(wheels[0]) as server_wheel:
        shipped = server_wheel.namelist()
    # Test and benchmark helpers live in tests/ (tests/factories.py, tests/sql/): none is shipped.
    assert [
        n for n in shipped if n.startswith("tests/") or "factor" in n or Path(n).name.startswith(("test", "conftest"))
    ] == []
    assert "app/sql/queries/jobs.sql" in shipped
    # The drills' own statements ship with the drills; the development scripts (make proto) do not.
    assert {"app/sql/drill/drill.sql", "app/sql/drill/replication.sql"} <= set(shipped)
    assert [n for n in shipped if n.startswith("scripts/") or n.endswith("codegen.py")] == []
    # The dashboard's files are package data, plotly.js's basic bundle with its licence among them; Swagger UI
    # comes from its package, not ours.
    assert {
        f"app/api/web/{n}"
        for n in (
            "index.html",
            "dashboard.js",
            "dashboard.css",
            "favicon.svg",
            "plotly-basic.min.js",
            "plotly-basic.LICENSE.txt",
        )
    } <= set(shipped)
    assert [n for n in shipped if n.endswith("swagger-ui-bundle.js")] == []
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    # This interpreter's pip installs into the new environment (no pip bootstrap there); the
    # dependencies come from pip's cache and index, kairos-sdk only from the wheel just built.
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--find-links", dist, *wheels)
    where = _run(
        python, "-c", "import app, kairos_sdk; print(app.__file__); print(kairos_sdk.__file__)", cwd=work
    ).stdout.split()
    assert all(Path(p).is_relative_to(env_dir) for p in where), where
    return env_dir / "bin"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of an installed kairos: KAIROS_HOME in tmp_path, nothing of the checkout."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("KAIROS_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["KAIROS_HOME"] = str(tmp_path / "home")
    yield env
    postmaster = tmp_path / "home" / "pgdata" / "postmaster.pid"
    if postmaster.exists():  # the last kairos process to leave should have stopped it; make sure
        os.kill(int(postmaster.read_text().split()[0]), signal.SIGINT)  # fast shutdown
        wait_for(lambda: not postmaster.exists(), timeout_s=30, what="the embedded postgres to stop")


def test_installed_wheel_migrates_and_accepts_a_job(installed: Path, home: dict[str, str], tmp_path: Path) -> None:
    kairos = installed / "kairos"
    upgraded = _run(kairos, "db", "upgrade", env=home, cwd=tmp_path, timeout=120)
    assert "0001_init" in upgraded.stdout + upgraded.stderr
    tenant = json.loads(
        _run(kairos, "tenants", "create", "wheel-test", "--json", env=home, cwd=tmp_path, timeout=60).stdout
    )
    port = free_port()
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        api = subprocess.Popen(
            [str(kairos), "api"],
            env={**home, "KAIROS_API_PORT": str(port)},
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert api.poll() is None, f"kairos api exited:\n{log.read_text()}"
            try:
                return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout_s=60, interval_s=0.1, what="kairos api to be ready")
        at = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=0)
        job = {
            "name": "from-the-wheel",
            "target": {"type": "queue", "ref": "emails"},
            "payload": {"n": 1},
            "schedule": {"runAt": at.isoformat().replace("+00:00", "Z")},
        }
        resp = httpx.post(
            f"{url}/v1/jobs", json=job, headers={"Authorization": f"Bearer {tenant['apiKey']}"}, timeout=10
        )
        assert resp.status_code == 201, resp.text
        # The web pages: plotly.js's bundle from our package data, Swagger UI from the installed swagger-ui-py.
        assert "/dashboard/assets/plotly-basic.min.js" in httpx.get(f"{url}/dashboard", timeout=10).text
        for asset in (
            "/dashboard/assets/plotly-basic.min.js",
            "/dashboard/assets/dashboard.js",
            "/schema/assets/swagger-ui-bundle.js",
            "/schema/assets/swagger-ui.css",
        ):
            served = httpx.get(f"{url}{asset}", timeout=10)
            assert served.status_code == 200 and len(served.content) > 10_000, asset
    finally:
        api.send_signal(signal.SIGTERM)
        try:
            api.wait(timeout=20)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait()
