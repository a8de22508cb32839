"""Egress policy for HTTP targets: refuse private, loopback, link-local and metadata addresses.

A target host is resolved once per delivery and every address it resolves to must be public
(``ipaddress``'s ``is_global``) or allow-listed (KAIROS_HTTP_EGRESS_ALLOW: IPs, CIDRs or host
names). The delivery then connects to the address that was checked, so a DNS answer that
changes between the check and the connection (rebinding) cannot reach a refused address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from app.errors import EgressRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata endpoints, named explicitly so an allow-listed range never exposes them.
METADATA = frozenset({
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
    ipaddress.ip_address("169.254.170.2"),    # AWS ECS task metadata
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),    # AWS IMDS over IPv6
})


@dataclass(frozen=True)
class EgressPolicy:
    allow_networks: tuple[IPNetwork, ...] = ()
    allow_hosts: frozenset[str] = frozenset()

    @classmethod
    def from_allow_list(cls, entries: Iterable[str]) -> EgressPolicy:
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(hosts))

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why ``address`` (which ``host`` resolved to) may not be contacted, or None."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address in METADATA:
            return f"{address} is a cloud metadata address"
        if host.lower().rstrip(".") in self.allow_hosts:
            return None
        if any(address in net for net in self.allow_networks):
            return None
        if address.is_loopback:
            return f"{address} is a loopback address"
        if address.is_link_local:
            return f"{address} is a link-local address"
        if address.is_private:
            return f"{address} is a private address"
        if not address.is_global or address.is_multicast:
            return f"{address} is not a public unicast address"
        return None

    async def resolve(self, host: str, port: int) -> IPAddress:
        """The address to connect to; raises EgressRefused when any answer is refused."""
        try:
            literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [literal]
        else:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise EgressRefused(f"{host} does not resolve: {exc.strerror}") from None
            addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))
        for address in addresses:
            reason = self.refusal(host, address)
            if reason:
                raise EgressRefused(f"egress refused for {host}: {reason}")
        if not addresses:
            raise EgressRefused(f"{host} does not resolve")
        return addresses[0]
