"""A local PostgreSQL primary with streaming standbys, for drills and chaos tests.

Model: a ``Cluster`` owns one temporary directory; each ``Node`` in it is one postmaster started
from the PostgreSQL binaries installed on the machine (``/usr/lib/postgresql/15/bin`` unless
the caller names another directory), listening on a free loopback port, TCP only, trust auth.
``start_primary()`` runs initdb; ``add_standby()`` clones a running node with
``pg_basebackup -R`` (so the clone streams from it) and, with ``synchronous=True``, makes the
source wait for the clone before a commit returns (``synchronous_standby_names``). ``promote()``
turns a standby into a primary; ``kill()`` SIGKILLs a node's whole process group, the way a lost
region loses its database. ``close()`` (or leaving the ``with`` block) stops every node and
deletes the directory, whatever state the nodes are in.

PostgreSQL refuses to run as root. As pgserver does for the embedded database, a root caller
runs every PostgreSQL binary as the unprivileged system user ``pgserver`` (created if missing)
and hands it the data directories.

Everything but the replication state is done with PostgreSQL's own binaries (initdb,
pg_basebackup, pg_ctl, pg_isready, createdb) and signals; the state is read with the drills' own
reads (``app.drill.reads.replication``). ``synchronous_standby_names`` lives in the node's own
``drill.conf`` (included by postgresql.conf, reloaded with SIGHUP); ``pg_basebackup`` copies that
file too, so a clone gets an empty one before it starts, and ``promote()`` empties it: a promoted
standby must never wait for a standby it does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from app.drill.reads import StandbyState, replication
from app.store.db import Database, create_engine

log = logging.getLogger(__name__)

PG_BIN_DEFAULT = Path("/usr/lib/postgresql/15/bin")
SYSTEM_USER_AS_ROOT = "pgserver"  # the user pgserver runs the embedded database as
START_TIMEOUT_S_DEFAULT = 30.0
STOP_TIMEOUT_S_DEFAULT = 10.0
DRILL_CONF = "drill.conf"
_PR_SET_PDEATHSIG = 1

# Settings every node gets on its command line. fsync=off is safe here: a drill kills processes,
# never the machine's power, so the page cache survives every fault the drill injects; it keeps
# two servers and a herd from fighting over the disk.
_COMMON_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "max_wal_senders": "10",
    "wal_level": "replica",
    "hot_standby": "on",
    "wal_receiver_status_interval": "1s",
    "wal_keep_size": "256MB",
    "log_min_messages": "warning",
    # A standby whose primary died retries its WAL source this often; promotion waits for it.
    "wal_retrieve_retry_interval": "200ms",
}


@dataclass(frozen=True)
class WalTail:
    """What a dead primary's WAL holds past the point its standby had received."""

    bytes: int  # from the standby's receive position to the end of the primary's last record
    commits: int  # transactions whose commit record is in it


def lsn_text(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def _lsn_value(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


_WALDUMP_RECORD = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*\d+, lsn: ([0-9A-F]+/[0-9A-F]+),")


class ClusterError(RuntimeError):
    """A PostgreSQL node of a drill cluster failed to start, clone or promote."""


def die_with_parent() -> None:
    """``preexec_fn`` of every child: SIGKILL it when the drill itself dies, whatever killed the drill.

    Linux's PR_SET_PDEATHSIG; it follows the thread that started the child, so children are started
    from the calling thread, never from a worker thread that may end first.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _system_user() -> pwd.struct_passwd | None:
    """The user to run PostgreSQL as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER_AS_ROOT)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", SYSTEM_USER_AS_ROOT], check=True, capture_output=True
        )
        return pwd.getpwnam(SYSTEM_USER_AS_ROOT)


@dataclass
class Node:
    """One postmaster of the cluster."""

    name: str
    pgdata: Path
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    extra_settings: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL (the form KAIROS_DATABASE_URL takes)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    async def standby(self, standby_name: str) -> StandbyState | None:
        """How ``standby_name`` streams from this node (None when it is not connected)."""
        state: StandbyState | None = await _read(self, lambda tx: replication(tx).standby(standby_name))
        return state

    async def wal_position(self) -> int | None:
        """Bytes of WAL it has: written (a primary) or received (a standby)."""
        position: int | None = await _read(self, lambda tx: replication(tx).wal_position())
        return position

    async def in_recovery(self) -> bool:
        return bool(await _read(self, lambda tx: replication(tx).in_recovery()))


async def _read(node: Node, work: Any) -> Any:
    db = Database(create_engine(node.url(), isolation="READ COMMITTED", pool_size=1))
    try:
        return await db.transaction(work)
    finally:
        await db.close()


class Cluster:
    """A temporary directory of PostgreSQL nodes; a context manager that always cleans up."""

    def __init__(
        self,
        *,
        base_dir: Path | None = None,
        pg_bin: Path = PG_BIN_DEFAULT,
        start_timeout_s: float = START_TIMEOUT_S_DEFAULT,
    ):
        if not (pg_bin / "postgres").exists():
            raise ClusterError(f"no PostgreSQL binaries in {pg_bin}")
        self.pg_bin = pg_bin
        self._user = _system_user()
        self.base_dir = Path(tempfile.mkdtemp(prefix="kairos-pg-", dir=base_dir))
        self._chown(self.base_dir)
        self.start_timeout_s = start_timeout_s
        self.nodes: dict[str, Node] = {}
        self._logs: list[IO[bytes]] = []

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building ---------------------------------------------------------------------------

    def start_primary(self, name: str = "primary") -> Node:
        node = self._new_node(name)
        self._run(
            "initdb",
            "-D",
            str(node.pgdata),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        with open(node.pgdata / "postgresql.conf", "a") as conf:
            conf.write(f"\ninclude_if_exists = '{DRILL_CONF}'\n")
        self._write_drill_conf(node, "")
        self._start(node)
        return node

    async def add_standby(self, source: Node, name: str = "standby", *, synchronous: bool = True) -> Node:
        """Clone ``source`` with ``pg_basebackup -R`` and start the clone streaming from it.

        With ``synchronous``, ``source`` then waits for the clone (whose ``cluster_name`` is its
        walreceiver's application_name) before a commit returns; this returns once the clone
        streams, as the synchronous standby when asked.
        """
        node = self._new_node(name)
        node.pgdata.rmdir()  # pg_basebackup creates it
        await asyncio.to_thread(
            self._run,
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(source.port),
            "-U",
            "postgres",
            "-D",
            str(node.pgdata),
            "-R",
            "-X",
            "stream",
            "--no-sync",
            "-c",
            "fast",
        )
        self._write_drill_conf(node, "")  # the copy of the source's would make a promoted clone wait
        node.extra_settings["cluster_name"] = name
        self._start(node)  # from this thread: see die_with_parent
        if synchronous:
            self.set_synchronous(source, [name])
        await self.wait_streaming(source, name, sync=synchronous)
        return node

    def set_synchronous(self, node: Node, standby_names: list[str]) -> None:
        """Make ``node`` wait for ``standby_names`` (empty: asynchronous) before commits return."""
        self._write_drill_conf(node, ",".join(f'"{name}"' for name in standby_names))  # names may hold "-"
        if node.running:
            assert node.process is not None
            node.process.send_signal(signal.SIGHUP)

    async def wait_streaming(
        self, source: Node, standby_name: str, *, sync: bool, timeout_s: float | None = None
    ) -> StandbyState:
        want = "sync" if sync else "async"
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while True:
            state = await source.standby(standby_name)
            if state and state.state == "streaming" and state.sync_state == want:
                return state
            if time.monotonic() > deadline:
                raise ClusterError(f"{standby_name} is not a {want} streaming standby of {source.name}: {state}")
            await asyncio.sleep(0.05)

    def create_database(self, node: Node, database: str) -> None:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(node.port), "-U", "postgres", database)

    # -- faults and recovery ----------------------------------------------------------------

    def kill(self, node: Node) -> None:
        """SIGKILL the postmaster and every backend: nothing gets to shut down cleanly."""
        if node.process is None:
            return
        self._signal_all(node, signal.SIGKILL)
        node.process.wait(timeout=STOP_TIMEOUT_S_DEFAULT)
        log.info("drill node killed", extra={"node": node.name, "port": node.port})

    def promote(self, node: Node, *, timeout_s: float = 30.0) -> float:
        """Promote a standby; return the seconds until it accepts writes."""
        started = time.monotonic()
        self.set_synchronous(node, [])  # a promoted standby waits for no standby
        self._run("pg_ctl", "promote", "-D", str(node.pgdata), "-w", "-t", str(int(timeout_s)))
        log.info("drill node promoted", extra={"node": node.name, "port": node.port})
        return time.monotonic() - started

    def stall_wal_senders(self, node: Node) -> int:
        """SIGSTOP ``node``'s WAL senders, as a stalled link between regions would hold replication back:
        commits wait for a synchronous standby, an asynchronous one falls behind. Returns how many."""
        if node.process is None:
            return 0
        senders = [
            child for child in psutil.Process(node.process.pid).children() if "walsender" in " ".join(child.cmdline())
        ]
        for sender in senders:
            sender.suspend()
        return len(senders)

    def wal_not_received(self, dead: Node, received: int) -> WalTail:
        """Read a stopped node's own WAL (pg_waldump) from ``received`` on: the bytes and the committed
        transactions its standby never got. Run after the kill: nothing is written any more."""
        result = subprocess.run(
            [str(self.pg_bin / "pg_waldump"), "-p", str(dead.pgdata / "pg_wal"), "-s", lsn_text(received)],
            capture_output=True,
            cwd=self.base_dir,
            timeout=60,
            check=False,
            **self._as_user(),
        )
        end, commits = received, 0
        for line in result.stdout.decode(errors="replace").splitlines():
            record = _WALDUMP_RECORD.search(line)
            if record is None:
                continue
            end = max(end, _lsn_value(record.group(2)) + int(record.group(1)))
            if "desc: COMMIT" in line:
                commits += 1
        return WalTail(bytes=end - received, commits=commits)

    # -- teardown ---------------------------------------------------------------------------

    def stop(self, node: Node, *, timeout_s: float = STOP_TIMEOUT_S_DEFAULT) -> None:
        """Fast shutdown (SIGINT); SIGKILL the group if it does not finish in time."""
        if node.process is None:
            return
        backends = self._backends(node)
        if node.process.poll() is None:
            # A stalled WAL sender (stall_wal_senders) must run again to see the shutdown.
            self._signal_all(node, signal.SIGCONT, backends)
            with contextlib.suppress(ProcessLookupError):
                node.process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=timeout_s)
        self._signal_all(node, signal.SIGKILL, backends)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.process.wait(timeout=timeout_s)

    @staticmethod
    def _backends(node: Node) -> list[psutil.Process]:
        """The postmaster's children while it lives (none once it is gone: they are orphans then)."""
        if node.process is None:
            return []
        try:
            return psutil.Process(node.process.pid).children(recursive=True)
        except psutil.Error:
            return []

    def _signal_all(self, node: Node, sig: signal.Signals, backends: list[psutil.Process] | None = None) -> None:
        """``sig`` to the postmaster and to each of its backends. Each backend is a session of its own
        (PostgreSQL's children call setsid()), so the postmaster's process group reaches none of them;
        a backend that is stopped (a stalled WAL sender) would otherwise outlive a killed postmaster."""
        assert node.process is not None
        backends = self._backends(node) if backends is None else backends
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(node.process.pid, sig)
        for backend in backends:
            with contextlib.suppress(psutil.Error):
                backend.send_signal(sig)

    def close(self) -> None:
        for node in list(self.nodes.values()):
            try:
                self.stop(node)
            except Exception:  # teardown must reach every node and the directory
                log.warning("drill node did not stop", extra={"node": node.name}, exc_info=True)
        for handle in self._logs:
            handle.close()
        self._logs.clear()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def log_tail(self, node: Node, lines: int = 20) -> str:
        try:
            return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- internals --------------------------------------------------------------------------

    def _new_node(self, name: str) -> Node:
        if name in self.nodes:
            raise ClusterError(f"node {name} exists already")
        pgdata = self.base_dir / name
        pgdata.mkdir(mode=0o700)
        self._chown(pgdata)
        node = Node(name=name, pgdata=pgdata, port=free_port(), log_path=self.base_dir / f"{name}.log")
        self.nodes[name] = node
        return node

    def _write_drill_conf(self, node: Node, synchronous_standby_names: str) -> None:
        path = node.pgdata / DRILL_CONF
        path.write_text(f"synchronous_standby_names = '{synchronous_standby_names}'\n")
        self._chown(path)

    def _start(self, node: Node) -> None:
        settings = {**_COMMON_SETTINGS, **node.extra_settings, "port": str(node.port)}
        args = [str(self.pg_bin / "postgres"), "-D", str(node.pgdata)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        handle = open(node.log_path, "ab")  # noqa: SIM115 - lives as long as the node
        self._logs.append(handle)
        node.process = subprocess.Popen(
            args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.base_dir,
            preexec_fn=die_with_parent,
            **self._as_user(),
        )
        deadline = time.monotonic() + self.start_timeout_s
        ready = [str(self.pg_bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(node.port), "-t", "1"]
        while subprocess.run(ready, check=False).returncode != 0:
            if node.process.poll() is not None:
                raise ClusterError(f"{node.name} exited at start:\n{self.log_tail(node)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{node.name} not accepting connections:\n{self.log_tail(node)}")
            time.sleep(0.05)
        log.info("drill node started", extra={"node": node.name, "port": node.port, "pid": node.process.pid})

    def _run(self, binary: str, *args: str) -> None:
        result = subprocess.run(
            [str(self.pg_bin / binary), *args],
            capture_output=True,
            cwd=self.base_dir,
            timeout=120,
            check=False,
            **self._as_user(),
        )
        if result.returncode != 0:
            raise ClusterError(
                f"{binary} failed ({result.returncode}): {result.stderr.decode(errors='replace').strip()}"
            )

    def as_postgres_user(self) -> dict[str, Any]:
        """``subprocess`` arguments that run a child as the user PostgreSQL runs as (empty: as ourselves)."""
        return self._as_user()

    def chown(self, path: Path) -> None:
        """Hand ``path`` to the user PostgreSQL runs as."""
        self._chown(path)

    def _as_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {
            "user": self._user.pw_uid,
            "group": self._user.pw_gid,
            "extra_groups": [],
            "env": {**os.environ, "HOME": str(self.base_dir), "LC_ALL": "C"},
        }

    def _chown(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)


def multi_host_url(nodes: list[Node], database: str) -> str:
    """One URL naming every node; libpq connects to whichever accepts writes.

    SQLAlchemy hands repeated ``host=`` query parameters to psycopg as libpq's host lists, and
    ``target_session_attrs=read-write`` makes each new connection skip a standby (or a dead
    node), so processes follow a promotion without being reconfigured.
    """
    hosts = "&".join(f"host=127.0.0.1:{n.port}" for n in nodes)
    return f"postgresql+psycopg://postgres@/{database}?{hosts}&target_session_attrs=read-write&connect_timeout=2"


async def start_pair(
    *, synchronous: bool = True, base_dir: Path | None = None, pg_bin: Path = PG_BIN_DEFAULT
) -> tuple[Cluster, Node, Node]:
    """A primary and one streaming standby (application_name ``standby``); the caller closes the cluster."""
    cluster = Cluster(base_dir=base_dir, pg_bin=pg_bin)
    try:
        primary = cluster.start_primary("primary")
        standby = await cluster.add_standby(primary, "standby", synchronous=synchronous)
    except BaseException:
        cluster.close()
        raise
    return cluster, primary, standby
