"""The egress policy at delivery: resolve a target's host once and check every address it resolves to.

The rules are pure and live in ``app.domain.egress`` (the API applies them to literal addresses at
submit). Here: the host is resolved once per delivery and every answer must pass; the delivery then
connects to the address that was checked, so a DNS answer that changes between the check and the
connection (rebinding) cannot reach a refused address. A name that does not resolve is
``TargetUnresolved`` (the delivery is retried with backoff), a refused one ``EgressRefused`` (dead-lettered
with ``REFUSED``: the tenant never learns what an internal name resolved to; the operator's log does).

``policy_for(settings)`` is the policy of this configuration, with Kairos's own listening ports (the API,
gRPC and metrics ports, the metrics ports ``kairos up`` gives its scheduler and executor, every port
``kairos up`` and ``kairos api`` tell their children (KAIROS_INSTALLATION_PORTS), the database's;
not the API's under ``KAIROS_DEMO``, whose demo job is delivered to the API itself)
and this host's own addresses; ``allow_list_warnings`` is what the executor logs at start about entries
that can match nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from app.config import Settings
from app.domain.egress import (
    REFUSED,
    EgressPolicy,
    IPAddress,
    address_kind,
    cached_policy,
    literal_address,
    normalize_host,
)
from app.errors import EgressRefused, TargetUnresolved

log = logging.getLogger(__name__)

__all__ = ["REFUSED", "EgressPolicy", "allow_list_warnings", "own_ports", "policy_for", "resolve"]

# The metrics ports of a default configuration (`kairos up` gives the scheduler 9464 and the executor
# 9465; the API it starts is told 0), refused even where this process was configured otherwise.
DEFAULT_METRICS_PORTS = (9464, 9465)


def own_ports(settings: Settings) -> frozenset[int]:
    """Every port a Kairos process of this configuration may listen on (but the API's in demo mode, whose
    demo job posts to the API's own ``/demo/echo``)."""
    ports = {settings.grpc_port, *DEFAULT_METRICS_PORTS, *settings.installation_ports, settings.api_port}
    if settings.metrics_port:
        # `kairos up` gives the scheduler KAIROS_METRICS_PORT and the executor the next one: a child sees one.
        ports |= {settings.metrics_port, settings.metrics_port - 1, settings.metrics_port + 1}
    try:
        database_port = urlsplit(settings.database_url).port if settings.database_url else None
    except ValueError:
        database_port = None
    if database_port:
        ports.add(database_port)
    if settings.demo:
        ports.discard(settings.api_port)  # also when KAIROS_INSTALLATION_PORTS lists it
    return frozenset(p for p in ports if 0 < p <= 65535)


def host_addresses() -> frozenset[IPAddress]:
    """This host's own addresses as its name resolves (a public one still serves Kairos's ports)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return frozenset()
    return frozenset(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)


def policy_for(settings: Settings) -> EgressPolicy:
    """The egress policy of ``settings`` (parsed once per configuration; the same settings object, the
    one a process runs with, answers from a memo: every submit validates its target with it)."""
    global _last_policy  # noqa: PLW0603 - one parsed policy per process's settings
    last = _last_policy
    if last is not None and last[0] is settings:
        return last[1]
    policy = cached_policy(tuple(settings.http_egress_allow), own_ports(settings), _own_addresses())
    _last_policy = (settings, policy)
    return policy


_last_policy: tuple[Settings, EgressPolicy] | None = None


_host_addresses: frozenset[IPAddress] | None = None


def _own_addresses() -> frozenset[IPAddress]:
    global _host_addresses  # noqa: PLW0603 - this host's addresses, read once per process
    if _host_addresses is None:
        _host_addresses = host_addresses()
    return _host_addresses


async def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetUnresolved(f"{host} does not resolve: {getattr(exc, 'strerror', None) or exc}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise TargetUnresolved(f"{host} does not resolve")
    return addresses


async def resolve(policy: EgressPolicy, host: str, port: int) -> IPAddress:
    """The address to connect to. Raises EgressRefused (any answer refused, or no host name) or TargetUnresolved.
    The host is normalised as at submit (``normalize_host``): both read one URL as one address."""
    try:
        host = normalize_host(host)
    except ValueError as exc:
        raise EgressRefused(f"{REFUSED}: {exc}") from None
    literal = literal_address(host)
    if literal is not None:
        if reason := policy.refusal(host, literal, port):
            raise EgressRefused(f"{REFUSED}: {reason}")  # the tenant wrote this address: it may read why
        return literal
    addresses = await _addresses(host, port)
    for address in addresses:
        if reason := policy.refusal(host, address, port):
            log.warning("egress refused", extra={"host": host, "port": port, "address": str(address), "reason": reason})
            raise EgressRefused(REFUSED)
    return addresses[0]


async def allow_list_warnings(policy: EgressPolicy) -> list[tuple[str, str]]:
    """(entry, why) for each allow-list entry that matches nothing plausible, host names resolved now."""
    found = policy.problems()
    for entry in policy.allow:
        if entry.host is None:
            continue
        try:
            addresses: Iterable[IPAddress] = await _addresses(entry.host, entry.port or 443)
        except TargetUnresolved:
            found.append((entry.text, "does not resolve now (checked again at each delivery)"))
            continue
        if all(address_kind(a) is None for a in addresses):
            found.append((entry.text, "resolves to public addresses only: the entry changes nothing"))
    return found
