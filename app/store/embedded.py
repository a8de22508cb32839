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
from typing import Any
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
    configure(server)
    uri = server.get_uri()
    log.info("embedded postgres ready", extra={"pgdata": str(pgdata)})
    return to_sqlalchemy_url(uri)


# The settings docs/operations.md recommends ("PostgreSQL settings"), given to the embedded server too,
# so what `make run` and the benchmarks run on is what production is told to run. On a database that has
# lived, the random keys of the large indexes (job and execution ids) spread every herd over most of
# their pages: with PostgreSQL's 128 MB of shared buffers those pages are read back, dirtied and
# written out again by the very statements that need them, and the first change of each after a
# checkpoint writes the whole page to the WAL. Buffers that hold the hot indexes, checkpoints further
# apart and those page images compressed are what kept a lived database's herd beside an empty one's
# (docs/database-at-scale.md, "The herd on a database that has lived").
SETTINGS = {"max_wal_size": "4GB", "checkpoint_timeout": "15min"}
WAL_COMPRESSION = ("lz4", "zstd")  # the first the server has (pglz, always there, costs more CPU than it saves)
SHARED_BUFFERS_MB = (128, 2048)  # an eighth of the machine's memory, within these bounds


def wanted_settings(built_compressions: list[str]) -> dict[str, str]:
    eighth = psutil.virtual_memory().total // 8 // 2**20
    wanted = {**SETTINGS, "shared_buffers": f"{max(SHARED_BUFFERS_MB[0], min(SHARED_BUFFERS_MB[1], eighth))}MB"}
    compression = next((m for m in WAL_COMPRESSION if m in built_compressions), None)
    if compression:
        wanted["wal_compression"] = compression
    return wanted


def to_change(conn: Any) -> dict[str, str]:
    """The settings above that the server of ``conn`` (a psycopg connection) does not have yet."""
    row = conn.execute("SELECT enumvals FROM pg_settings WHERE name = 'wal_compression'").fetchone()
    wanted = wanted_settings(list(row[0]) if row and row[0] else [])
    out = {}
    for name, value in wanted.items():
        same = conn.execute(
            "SELECT current_setting(%(n)s) = %(v)s OR (%(v)s ~ '^[0-9]+[kMG]B$' "
            "AND pg_size_bytes(current_setting(%(n)s)) = pg_size_bytes(%(v)s))",
            {"n": name, "v": value},
        ).fetchone()
        if not (same and same[0]):
            out[name] = value
    return out


def tune(uri: str) -> bool:
    """Give the server at ``uri`` the settings above (ALTER SYSTEM, then a reload); True when one of them
    waits for a restart (shared_buffers, until the server's first restart). A server that has them
    already is left alone."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        changed = to_change(conn)
        for name, value in changed.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        if changed:
            conn.execute("SELECT pg_reload_conf()")
            log.info("embedded postgres tuned", extra={"settings": changed})
        return _waits_for_restart(conn)


def _waits_for_restart(conn: Any) -> bool:
    row = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart").fetchone()
    return bool(row and row[0])


def configure(server: Any) -> None:
    """tune() a pgserver server, and restart it when a setting waits for that (on its first start only:
    the settings stay in its data directory's postgresql.auto.conf). Under pgserver's lock, and only
    when the server still waits: processes starting at once restart it once."""
    if not tune(server.get_uri()):
        return
    import pgserver
    import psycopg

    with server._lock:  # pgserver's inter-process lock around starting its server
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            if not _waits_for_restart(conn):
                return  # another process restarted it meanwhile
        pgserver.pg_ctl(  # type: ignore[attr-defined]  # pgserver makes its command functions at import
            ["-w", "-m", "fast", "-l", str(server.log), "restart"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=60,
        )
        server.ensure_postgres_running()  # its handle reads the new postmaster's pid


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
