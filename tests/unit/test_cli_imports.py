"""A REST command of the CLI loads the REST client and nothing of the server: no database layer, no tiers,
no gRPC, no Litestar (each costs its import time on every `kairos jobs ls`)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "sqlalchemy",
    "psycopg",
    "app.store",
    "app.api",
    "app.scheduler",
    "app.executor",
    "grpc",
    "litestar",
    "opentelemetry",
    "app.domain.schedule",
)


def test_jobs_ls_imports_nothing_of_the_server() -> None:
    probe = (
        "import sys, click\n"
        "from app.cli import main\n"
        "ctx = click.Context(main)\n"
        "main.get_command(ctx, 'jobs').get_command(ctx, 'ls')\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    found = sorted(m for m in loaded.stdout.split() if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert found == [], found
