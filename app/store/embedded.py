"""The embedded PostgreSQL (pgserver) used when KAIROS_DATABASE_URL is not set.

pgserver keeps one postmaster per data directory and counts the processes attached to it,
so every ``kairos`` command started with the same KAIROS_HOME shares one server, and the last
one to detach (with cleanup "stop") shuts it down cleanly. ``postmaster`` and ``restart`` let
``kairos up`` notice a server that died (SIGKILL, OOM killer) and start it again on the same data
directory and socket, so the URL its children hold stays valid; PostgreSQL's crash recovery
replays the WAL, so nothing committed is lost.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil

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


def postmaster(pgdata: Path) -> int | None:
    """The pid of the postmaster serving ``pgdata`` (its postmaster.pid), or None when none runs (a dead
    process, or a zombie nobody reaped yet)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or proc.name() != "postgres":
            return None
    except psutil.Error:
        return None
    return pid


def restart(pgdata: Path) -> str:
    """Start the server of ``pgdata`` again after it died; the same URL as before. Blocking (pg_ctl waits
    for the server to accept connections, and for crash recovery); raises when it cannot start (an old
    backend still holding the shared memory, say), and the caller tries again later."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(str(pgdata))  # this process's handle, from its first start
        with server._lock:  # pgserver's inter-process lock around starting its server
            server.ensure_postgres_running()
    if postmaster(pgdata) is None:  # pgserver took a zombie for a live server
        raise RuntimeError(f"the embedded server in {pgdata} did not start")
    log.info("embedded postgres restarted", extra={"pgdata": str(pgdata)})
    return to_sqlalchemy_url(server.get_uri())


def to_sqlalchemy_url(uri: str, database: str | None = None) -> str:
    """``postgresql://postgres:@/postgres?host=/sock`` -> ``postgresql+psycopg://postgres@/db?host=/sock``."""
    parts = urlsplit(uri)
    host = parse_qs(parts.query).get("host", [""])[0]
    user = parts.username or "postgres"
    db = database or parts.path.lstrip("/") or "postgres"
    return f"postgresql+psycopg://{user}@/{db}?host={host}"
