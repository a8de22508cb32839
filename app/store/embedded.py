"""The embedded PostgreSQL (pgserver) used when KAIROS_DATABASE_URL is not set.

pgserver keeps one postmaster per data directory and counts the processes attached to it,
so every ``kairos`` command started with the same KAIROS_HOME shares one server, and the last
one to detach (with cleanup "stop") shuts it down cleanly.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)


def start(pgdata: Path, *, cleanup: str | None = "stop") -> str:
    """Start or join the server in ``pgdata``; return a SQLAlchemy URL for psycopg.

    cleanup: "stop" stops the server when the last attached process exits, "delete" also
    removes the data directory (throwaway test servers), None leaves it running.
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI) and falls back to /tmp.
        warnings.simplefilter("ignore")
        import pgserver

        pgdata.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(str(pgdata), cleanup_mode=cleanup)
    uri = server.get_uri()
    log.info("embedded postgres ready", extra={"pgdata": str(pgdata)})
    return to_sqlalchemy_url(uri)


def to_sqlalchemy_url(uri: str, database: str | None = None) -> str:
    """``postgresql://postgres:@/postgres?host=/sock`` -> ``postgresql+psycopg://postgres@/db?host=/sock``."""
    parts = urlsplit(uri)
    host = parse_qs(parts.query).get("host", [""])[0]
    user = parts.username or "postgres"
    db = database or parts.path.lstrip("/") or "postgres"
    return f"postgresql+psycopg://{user}@/{db}?host={host}"
