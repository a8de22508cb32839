"""Patroni and a three-member etcd deciding a failover, for ``kairos drill region-failover --failover patroni``.

Model: a ``PatroniSite`` lives in the drill cluster's directory and uses the machine's Debian packages
(``etcd`` from etcd-server, ``patroni``), every process on loopback ports:

* three etcd members, one per region (the two PostgreSQL regions and a witness region that holds no
  database), so losing any one region keeps a quorum;
* one Patroni member per PostgreSQL region, named after it, which runs that region's postmaster from
  the installed PostgreSQL binaries (as the unprivileged PostgreSQL user when the drill runs as root,
  as ``Cluster`` does). The first member bootstraps the cluster with initdb, the second clones it with
  pg_basebackup and streams from it; with ``synchronous`` Patroni's synchronous mode names the
  streaming standby in ``synchronous_standby_names`` (and in etcd, as the one allowed to take over).

Patroni holds the leader key in etcd under a lease of ``ttl_s`` and renews it every ``loop_wait_s``.
``kill_region`` SIGKILLs a region's Patroni, its postmaster with every backend and its etcd member
at once; nothing renews the key any more, etcd expires it after the TTL (the failure detection), the
surviving member's Patroni takes the key and promotes its PostgreSQL (the promotion). ``leader()``
reads the key, ``etcd_leader()`` says which member leads etcd's own Raft group (a lost etcd leader
costs an election, and etcd resets every lease's TTL when its leader changes, so the detection
takes longer).

``close()`` stops Patroni (SIGTERM: it stops its PostgreSQL), then SIGKILLs whatever is left of
every postmaster and etcd member; the directory goes with the cluster's.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import psutil

from app.drill.cluster import Cluster, ClusterError, Node, die_with_parent, free_port

log = logging.getLogger(__name__)

PATRONI, ETCD = "patroni", "etcd"
SCOPE = "kairos"
NAMESPACE = "/service/"
LEADER_KEY = f"{NAMESPACE}{SCOPE}/leader"
TTL_S_DEFAULT = 10
LOOP_WAIT_S_DEFAULT = 1
# Patroni refuses to promote a standby further behind the last primary position it saw than this
# (maximum_lag_on_failover, 1 MB by default). The drill lets the asynchronous standby take over
# whatever its lag, so the loss is measured rather than the failover refused.
MAX_LAG_ON_FAILOVER_BYTES = 1 << 30
START_TIMEOUT_S_DEFAULT = 60.0
STOP_TIMEOUT_S_DEFAULT = 10.0
POLL_S = 0.05

# What every PostgreSQL node of the site runs with (as app.drill.cluster's nodes do); the settings
# Patroni keeps cluster-wide in etcd go under bootstrap.dcs, the rest per member.
_DCS_PARAMETERS = {
    "max_connections": 300,
    "max_wal_senders": 10,
    "wal_level": "replica",
    "hot_standby": "on",
    "wal_keep_size": "256MB",
    "wal_log_hints": "on",
}
_MEMBER_PARAMETERS = {
    "fsync": "off",
    "full_page_writes": "off",
    "wal_receiver_status_interval": "1s",
    "wal_retrieve_retry_interval": "200ms",
    "log_min_messages": "warning",
}


def missing_binaries() -> list[str]:
    """The executables the Patroni mode needs that are not on PATH (Debian: patroni, etcd-server)."""
    return [name for name in (PATRONI, ETCD) if shutil.which(name) is None]


@dataclass
class EtcdMember:
    name: str
    region: str
    client_port: int
    peer_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class PatroniMember:
    """One Patroni and the PostgreSQL it runs (``node``: its port, data directory and log)."""

    name: str
    node: Node
    api_port: int
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.node.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


class PatroniSite:
    """Three etcd members and one Patroni member per PostgreSQL region, inside ``cluster``'s directory."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        synchronous: bool,
        ttl_s: int = TTL_S_DEFAULT,
        loop_wait_s: int = LOOP_WAIT_S_DEFAULT,
        start_timeout_s: float = START_TIMEOUT_S_DEFAULT,
    ):
        if missing := missing_binaries():
            raise ClusterError(f"not installed: {', '.join(missing)} (Debian: apt-get install patroni etcd-server)")
        # Patroni's rule: a lost DCS or PostgreSQL call is retried for retry_timeout, twice within a TTL.
        if ttl_s < loop_wait_s + 2:
            raise ValueError(f"the Patroni TTL must be at least loop_wait + 2 s ({loop_wait_s + 2} s)")
        self.cluster = cluster
        self.synchronous = synchronous
        self.ttl_s, self.loop_wait_s = ttl_s, loop_wait_s
        self.retry_timeout_s = max(1, (ttl_s - loop_wait_s) // 2)
        self.start_timeout_s = start_timeout_s
        self.directory = cluster.base_dir / "patroni"
        self.directory.mkdir()
        cluster.chown(self.directory)
        self.etcd: list[EtcdMember] = []
        self.members: dict[str, PatroniMember] = {}
        self._logs: list[IO[bytes]] = []

    # -- etcd -------------------------------------------------------------------------------

    def start_etcd(self, regions: list[str]) -> None:
        """One etcd member per region, in one new Raft group; returns once every member is healthy."""
        self.etcd = [
            EtcdMember(f"etcd-{region}", region, free_port(), free_port(), self.directory / f"etcd-{region}")
            for region in regions
        ]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.etcd)
        for member in self.etcd:
            # Heartbeat and election timeout are etcd's defaults (100 ms, 1 s): a lost Raft leader costs
            # about a second, and the shortest lease etcd grants is 1.5 election timeouts.
            member.process = self._spawn(
                member.name,
                [
                    ETCD,
                    "--name",
                    member.name,
                    "--data-dir",
                    str(member.data_dir),
                    "--listen-client-urls",
                    member.client_url,
                    "--advertise-client-urls",
                    member.client_url,
                    "--listen-peer-urls",
                    member.peer_url,
                    "--initial-advertise-peer-urls",
                    member.peer_url,
                    "--initial-cluster",
                    initial,
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    f"kairos-drill-{os.getpid()}",
                    "--log-level",
                    "warn",
                ],
                as_postgres=False,
            )
        deadline = time.monotonic() + self.start_timeout_s
        for member in self.etcd:
            while not self._etcd_healthy(member):
                if not member.running:
                    raise ClusterError(f"{member.name} exited at start:\n{self.log_tail(member.name)}")
                if time.monotonic() > deadline:
                    raise ClusterError(f"{member.name} not healthy:\n{self.log_tail(member.name)}")
                time.sleep(POLL_S)
        log.info("drill etcd started", extra={"members": [m.name for m in self.etcd]})

    def _etcd_healthy(self, member: EtcdMember) -> bool:
        try:
            return bool(httpx.get(f"{member.client_url}/health", timeout=1.0).json().get("health") == "true")
        except (httpx.HTTPError, ValueError):
            return False

    def _etcd_call(self, path: str, body: dict[str, Any]) -> tuple[EtcdMember, dict[str, Any]] | None:
        """POST to etcd's v3 JSON gateway on the first member that answers (None: none did)."""
        for member in self.etcd:
            if not member.running:
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError):
                resp = httpx.post(f"{member.client_url}{path}", json=body, timeout=0.5)
                if resp.status_code == 200:
                    return member, resp.json()
        return None

    def leader(self) -> str | None:
        """Who holds Patroni's leader key (the member name), None when nobody does; ClusterError when no
        etcd member answers (a Raft election in progress, or no quorum)."""
        answer = self._etcd_call("/v3/kv/range", {"key": base64.b64encode(LEADER_KEY.encode()).decode()})
        if answer is None:
            raise ClusterError("no etcd member answered")
        kvs = answer[1].get("kvs") or []
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def etcd_leader(self) -> str | None:
        """The region of the etcd member that leads the Raft group."""
        by_id: dict[str, EtcdMember] = {}
        leader_id = None
        for member in self.etcd:
            if not member.running:
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                status = httpx.post(f"{member.client_url}/v3/maintenance/status", json={}, timeout=0.5).json()
                by_id[str(status["header"]["member_id"])] = member
                leader_id = str(status["leader"])
        found = by_id.get(leader_id or "")
        return found.region if found else None

    # -- Patroni ----------------------------------------------------------------------------

    def start_member(self, name: str) -> PatroniMember:
        """Start ``name``'s Patroni: the first bootstraps the cluster, a later one clones the leader."""
        pg_port, api_port = free_port(), free_port()
        home = self.directory / name
        home.mkdir(mode=0o700)
        self.cluster.chown(home)
        pgdata = home / "data"
        node = Node(name=name, pgdata=pgdata, port=pg_port, log_path=home / "postgresql.log")
        member = PatroniMember(
            name=name,
            node=node,
            api_port=api_port,
            config_path=home / "patroni.yml",
            log_path=self.directory / f"patroni-{name}.log",
        )
        member.config_path.write_text(json.dumps(self._config(member, home)))  # JSON is YAML
        self.cluster.chown(member.config_path)
        member.process = self._spawn(f"patroni-{name}", [PATRONI, str(member.config_path)], as_postgres=True)
        self.members[name] = member
        log.info("drill patroni started", extra={"member": name, "pg_port": pg_port, "api_port": api_port})
        return member

    def _config(self, member: PatroniMember, home: Path) -> dict[str, Any]:
        address = f"127.0.0.1:{member.node.port}"
        return {
            "scope": SCOPE,
            "namespace": NAMESPACE,
            "name": member.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {"listen": f"127.0.0.1:{member.api_port}", "connect_address": f"127.0.0.1:{member.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{m.client_port}" for m in self.etcd], "protocol": "http"},
            "bootstrap": {
                "dcs": {
                    "ttl": self.ttl_s,
                    "loop_wait": self.loop_wait_s,
                    "retry_timeout": self.retry_timeout_s,
                    "maximum_lag_on_failover": MAX_LAG_ON_FAILOVER_BYTES,
                    "synchronous_mode": self.synchronous,
                    "synchronous_mode_strict": False,
                    "postgresql": {"use_pg_rewind": False, "use_slots": True, "parameters": _DCS_PARAMETERS},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": address,
                "connect_address": address,
                "data_dir": str(member.node.pgdata),
                "bin_dir": str(self.cluster.pg_bin),
                "pgpass": str(home / "pgpass"),
                "authentication": {"superuser": {"username": "postgres"}, "replication": {"username": "postgres"}},
                "parameters": {**_MEMBER_PARAMETERS, "unix_socket_directories": str(home)},
                "pg_hba": ["host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"],
                "basebackup": [{"checkpoint": "fast"}],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def wait_role(self, member: PatroniMember, role: str, *, timeout_s: float | None = None) -> None:
        """Until ``member``'s REST API answers 200 on ``/role``: primary, replica, sync (a synchronous
        standby) or async."""
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{member.api_url}/{role}", timeout=1.0).status_code == 200:
                    return
            if member.process is not None and member.process.poll() is not None:
                raise ClusterError(f"patroni {member.name} exited:\n{self.log_tail(f'patroni-{member.name}')}")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"patroni {member.name} not {role} within {timeout_s or self.start_timeout_s:.0f} s:"
                    f"\n{self.log_tail(f'patroni-{member.name}')}"
                )
            time.sleep(POLL_S * 2)

    # -- the fault --------------------------------------------------------------------------

    def stall_wal_senders(self, region: str) -> int:
        """SIGSTOP the WAL senders of ``region``'s PostgreSQL (see ``Cluster.stall_wal_senders``)."""
        pid = self.members[region].postmaster_pid()
        if pid is None:
            return 0
        try:
            senders = [child for child in psutil.Process(pid).children() if "walsender" in " ".join(child.cmdline())]
        except psutil.Error:
            return 0
        for sender in senders:
            with contextlib.suppress(psutil.Error):
                sender.suspend()
        return len(senders)

    def kill_region(self, region: str) -> None:
        """SIGKILL ``region``'s Patroni, its postmaster and every backend, and its etcd member, at once."""
        member = self.members.get(region)
        if member is not None:
            victims = self._member_processes(member)
            for process in victims:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            psutil.wait_procs(victims, timeout=STOP_TIMEOUT_S_DEFAULT)
            if member.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    member.process.wait(timeout=STOP_TIMEOUT_S_DEFAULT)
        for etcd in self.etcd:
            if etcd.region == region and etcd.process is not None:
                etcd.process.kill()
                etcd.process.wait(timeout=STOP_TIMEOUT_S_DEFAULT)
        log.info("drill patroni region killed", extra={"region": region})

    def _member_processes(self, member: PatroniMember) -> list[psutil.Process]:
        """Patroni and what it started, and the postmaster (its own session, Patroni detaches it) with
        every backend (each its own session too)."""
        roots = [pid for pid in (member.process.pid if member.process else None, member.postmaster_pid()) if pid]
        found: dict[int, psutil.Process] = {}
        for pid in roots:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                for process in [root, *root.children(recursive=True)]:
                    found[process.pid] = process
        return list(found.values())

    # -- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        for member in self.members.values():
            if member.process is not None and member.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    member.process.send_signal(signal.SIGTERM)  # Patroni stops its PostgreSQL first
        for member in self.members.values():
            if member.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    member.process.wait(timeout=STOP_TIMEOUT_S_DEFAULT)
            for process in self._member_processes(member):
                with contextlib.suppress(psutil.Error):
                    process.kill()
            if member.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    member.process.wait(timeout=STOP_TIMEOUT_S_DEFAULT)
        for etcd in self.etcd:
            if etcd.process is not None and etcd.process.poll() is None:
                etcd.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    etcd.process.wait(timeout=STOP_TIMEOUT_S_DEFAULT)
        for handle in self._logs:
            handle.close()
        self._logs.clear()

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join((self.directory / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- internals --------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], *, as_postgres: bool) -> subprocess.Popen[bytes]:
        handle = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        self._logs.append(handle)
        extra = self.cluster.as_postgres_user() if as_postgres else {}
        inherited = {**os.environ}
        env = {**extra.pop("env", inherited), "PATH": inherited.get("PATH", "/usr/bin:/bin")}
        return subprocess.Popen(
            args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.directory,
            preexec_fn=die_with_parent,
            env=env,
            **extra,
        )
