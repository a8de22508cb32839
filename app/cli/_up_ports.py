"""The ports of `kairos up` (app.cli.supervisor): those its tiers listen on, checked before they start,
and the metrics ports of its children and of itself."""

from __future__ import annotations

import contextlib
import errno
import socket

from app.config import Settings


class StartFailed(RuntimeError):
    """Kairos cannot come up, or a tier cannot be brought back: the message is the line to print."""


def ports(settings: Settings) -> dict[str, tuple[str, int, str]]:
    """The tier that listens on each port -> (host, port, the variable that moves it)."""
    return {
        "api": (settings.api_host, settings.api_port, "KAIROS_API_PORT"),
        "executor": (settings.grpc_host, settings.grpc_port, "KAIROS_GRPC_PORT"),
    }


def port_problem(host: str, port: int, variable: str) -> str | None:
    """Why nothing of ours could listen on ``host:port`` now (held by another process, not an address
    of this host), or None."""
    if port == 0:
        return None  # the tier picks a free one
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Like the tiers: a connection of an earlier run still in TIME_WAIT does not hold the port. Without
        # SO_REUSEPORT, a listener that would share the port with us (SO_REUSEPORT) does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {host}:{port} in use ({variable})"
            return f"cannot listen on {host}:{port} ({variable}): {exc.strerror or exc}"
    return None


def check_ports(settings: Settings) -> None:
    """StartFailed naming the first port a tier could not listen on."""
    for host, port, variable in ports(settings).values():
        if problem := port_problem(host, port, variable):
            raise StartFailed(problem)


def metrics_ports(settings: Settings) -> dict[str, int]:
    """Each child's KAIROS_METRICS_PORT: the scheduler's is ours, the executor's the next one, `kairos up`'s
    own the one after (none when ours is 0); the API has none of its own, its /metrics is on the API port."""
    base = settings.metrics_port
    return {
        "api": 0,
        "scheduler": base,
        "executor": base + 1 if 0 < base < 65535 else 0,
        "up": base + 2 if 0 < base < 65534 else 0,
    }


def installation_ports(settings: Settings, url: str) -> list[int]:
    """Every port this run listens on, for each child's egress policy (KAIROS_INSTALLATION_PORTS): the API sees
    the scheduler's and executor's metrics ports and ours, which its own settings do not name."""
    from urllib.parse import urlsplit

    ports = {settings.api_port, settings.grpc_port, *metrics_ports(settings).values(), *settings.installation_ports}
    with contextlib.suppress(ValueError):
        ports.add(urlsplit(url).port or 0)
    return sorted(p for p in ports if 0 < p <= 65535)


def probe_host(settings: Settings) -> str:
    """Where this machine reaches the metrics ports."""
    return "127.0.0.1" if settings.metrics_host in ("0.0.0.0", "::", "") else settings.metrics_host


def metrics_urls(settings: Settings) -> str:
    """Where each tier's /metrics is, for the banner."""
    host = probe_host(settings)
    urls = [f"api {settings.api_url}/metrics"]
    urls += [f"{tier} http://{host}:{port}/metrics" for tier, port in metrics_ports(settings).items() if port]
    return "   ".join(urls)
