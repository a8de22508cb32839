"""Egress policy for HTTP targets: which address and port a delivery may connect to. Pure; no I/O.

Refused unless the allow list (KAIROS_HTTP_EGRESS_ALLOW) permits them: loopback, private, link-local,
site-local (``fec0::/10``), shared (CGNAT), reserved, multicast and unspecified addresses, and the local-use
NAT64 prefix ``64:ff9b:1::/48``. An IPv6 address that embeds an IPv4 address is judged by the IPv4 address
it embeds (the one the packet ends up at), as Guava's ``InetAddresses.getEmbeddedIPv4ClientAddress`` and
the ``ipaddress`` properties do: IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``,
IPv4-translated ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::`` and Teredo
``2001:0::/32`` (server and client). The allow list applies to the embedded address of an IPv4-mapped
one only (the kernel connects to that IPv4 address itself); a tunnelled or translated form of an
allow-listed private address stays refused unless the IPv6 address itself is allowed.

Refused whatever the allow list says: cloud metadata addresses (also when embedded), and Kairos's own
listening ports (``own_ports``: API, gRPC, metrics and probes, the database) on any address that is not
public or is one of this host's own (``own_addresses``): its answers must never come back in a tenant's
dead letter.

Hosts are compared as ``normalize_host`` spells them, at submit and at delivery alike: percent-decoded
(``%31%32%37.0.0.1`` is ``127.0.0.1``), mapped by IDNA's UTS 46 rules (full-width digits and the dots
``。．｡`` become ASCII, non-ASCII labels their ``xn--`` form), lower case, without a trailing dot. What
a resolver or an HTTP client would read as an address is judged as that address wherever it is checked.

An allow-list entry is an IP (``10.0.0.5``), a CIDR (``10.0.0.0/8``) or a host name (``hooks.internal``),
each optionally with a port (``127.0.0.1:8081``, ``[fd00::1]:8443``, ``10.0.0.0/8:443``,
``hooks.internal:8080``); with a port it opens that port only.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import unquote

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata endpoints, named explicitly so an allow-listed range never exposes them.
METADATA = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
        ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.ip_address("169.254.170.23"),  # AWS EKS pod identity agent
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.ip_address("fd00:ec2::254"),  # AWS IMDS over IPv6
        ipaddress.ip_address("fd00:ec2::23"),  # AWS EKS pod identity agent over IPv6
    }
)
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the IPv4 address is the last 32 bits
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: where the IPv4 sits depends on the site
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
# inet_aton's legacy IPv4 spellings (127.1, 0x7f.0.0.1, 2130706433, 017700000001): digits, dots, hex.
_LEGACY_IPV4 = re.compile(r"^(0[xX][0-9a-fA-F]+|[0-9]+)(\.(0[xX][0-9a-fA-F]+|[0-9]+)){0,3}$")

# What a refusal says to the tenant when the host was a name: never the address it resolved to.
REFUSED = "target refused by egress policy"


# Dots UTS 46 maps to "." (ideographic, full-width, half-width ideographic).
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def normalize_host(host: str) -> str:
    """The host a URL names, as every check compares it: percent-decoded (once), IDNA-mapped (UTS 46: full-width
    characters and dots folded, non-ASCII labels as ``xn--``), lower case, no trailing dot, no brackets. An IPv6
    literal is only unbracketed and lower-cased. ValueError when it is no host name an HTTP client could
    use (a stray ``%``, a control character, a label IDNA refuses)."""
    text = host.strip()
    if text.startswith("[") or text.count(":") >= 2:  # an IPv6 literal; its zone id may hold %25
        return text.strip("[]").lower()
    decoded = unquote(text, errors="strict") if "%" in text else text
    if "%" in decoded or any(ord(c) < 0x21 or ord(c) == 0x7F for c in decoded):
        raise ValueError(f"{host!r} is not a host name")
    decoded = decoded.translate(_DOTS)
    if not decoded.isascii():
        try:
            decoded = idna.encode(decoded, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise ValueError(f"{host!r} is not a host name: {exc}") from None
    return decoded.lower().rstrip(".")


def host_key(host: str) -> str:
    """A host name as the policy compares it (``normalize_host``; one that is none, only lower-cased)."""
    try:
        return normalize_host(host)
    except ValueError:
        return host.strip().strip("[]").lower().rstrip(".")


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host spells literally (brackets, zone ids and legacy IPv4 forms allowed), or None."""
    text = host_key(host)
    text = re.sub(r"%(25)?[^%]*$", "", text) if ":" in text else text  # fe80::1%eth0, fe80::1%25eth0
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _LEGACY_IPV4.match(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def is_localhost_name(host: str) -> bool:
    """RFC 6761: ``localhost`` and every name under it are the loopback address."""
    key = host_key(host)
    return key == "localhost" or key.endswith(".localhost")


def embedded_ipv4(address: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries to (mapped, compatible, translated, NAT64, 6to4, Teredo)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return ()
    value = int(address)
    low = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if value >> 32 == 0xFFFF0000:  # ::ffff:0:a.b.c.d (SIIT, RFC 6145)
        return (low,)
    if value >> 32 == 0 and value > 1:  # ::a.b.c.d (deprecated IPv4-compatible; :: and ::1 are themselves)
        return (low,)
    if address in _NAT64_WELL_KNOWN:
        return (low,)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        server, client = address.teredo
        return (server, client)
    return ()


def address_kind(address: IPAddress) -> str | None:
    """Why an address is not public ("loopback", "private", ...), or None for a public unicast address."""
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if address in _NAT64_LOCAL_USE:
        return "local-use NAT64"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-public"
    return None


@dataclass(frozen=True)
class AllowEntry:
    """One KAIROS_HTTP_EGRESS_ALLOW entry: a network or a host name, optionally one port of it."""

    text: str
    network: IPNetwork | None = None
    host: str | None = None
    port: int | None = None

    def matches(self, host: str, address: IPAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address.version == self.network.version and address in self.network
        return self.host == host_key(host)


def parse_allow_entry(text: str) -> AllowEntry | str:
    """The entry, or why it is not one."""
    entry = text.strip()
    where, port_text = entry, ""
    if entry.startswith("["):  # [v6] or [v6]:port or [v6/len]:port
        close = entry.find("]")
        if close < 0:
            return "an opening [ without its ]"
        where, rest = entry[1:close], entry[close + 1 :]
        if rest and not rest.startswith(":"):
            return "expected :PORT after ]"
        port_text = rest[1:]
    elif entry.count(":") == 1:  # v4, v4/len or a name, with a port
        where, port_text = entry.split(":")
    port: int | None = None
    if port_text or entry.endswith(":"):
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            return f"port {port_text!r} is not 1-65535"
        port = int(port_text)
    try:
        return AllowEntry(entry, network=ipaddress.ip_network(where, strict=False), port=port)
    except ValueError:
        pass
    if ":" in where or "/" in where:
        return "not an IP address or CIDR"
    name = host_key(where)
    if not _HOST_NAME.match(name):
        return "not an IP address, CIDR or host name"
    if literal_address(name) is not None:  # 127.1 and friends: say the address itself
        return f"a legacy spelling of {literal_address(name)}; write the address"
    return AllowEntry(entry, host=name, port=port)


@dataclass(frozen=True)
class EgressPolicy:
    allow: tuple[AllowEntry, ...] = ()
    # Entries of the list that are none: (entry, why), for the warning at start.
    invalid: tuple[tuple[str, str], ...] = ()
    # Kairos's own listening ports, refused on every non-public address and on this host's own.
    own_ports: frozenset[int] = frozenset()
    own_addresses: frozenset[IPAddress] = field(default_factory=frozenset)

    @classmethod
    def from_allow_list(
        cls, entries: Iterable[str], *, own_ports: Iterable[int] = (), own_addresses: Iterable[IPAddress] = ()
    ) -> EgressPolicy:
        allow: list[AllowEntry] = []
        invalid: list[tuple[str, str]] = []
        for text in entries:
            if not text.strip():
                continue
            parsed = parse_allow_entry(text)
            if isinstance(parsed, str):
                invalid.append((text.strip(), parsed))
            else:
                allow.append(parsed)
        return cls(tuple(allow), tuple(invalid), frozenset(p for p in own_ports if p > 0), frozenset(own_addresses))

    def allowed(self, host: str, address: IPAddress, port: int) -> bool:
        return any(entry.matches(host, address, port) for entry in self.allow)

    def refusal(self, host: str, address: IPAddress, port: int) -> str | None:
        """Why ``address``:``port`` (which ``host`` stands for) may not be contacted, or None."""
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            address = ipaddress.IPv6Address(str(address).split("%")[0])
        if address in METADATA:
            return f"{address} is a cloud metadata address"
        embedded = embedded_ipv4(address)
        if any(v4 in METADATA for v4 in embedded):
            return f"{address} embeds a cloud metadata address"
        if port in self.own_ports and any(
            address_kind(a) is not None or a in self.own_addresses for a in (address, *embedded)
        ):
            return f"port {port} is one of Kairos's own listening ports"
        if self.allowed(host, address, port):
            return None
        if embedded:
            # An IPv4-mapped address is the IPv4 address (the kernel connects to it), so the allow list
            # applies to it; the tunnelled and translated forms reach it elsewhere: never allow-listed by it.
            mapped = isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None
            judge = self if mapped else EgressPolicy(own_ports=self.own_ports)
            for v4 in embedded:
                if reason := judge.refusal(host, v4, port):
                    return f"{address} embeds {v4}: {reason}"
            return None
        kind = address_kind(address)
        return f"{address} is a {kind} address" if kind else None

    def refused_literal(self, host: str, port: int) -> str | None:
        """At submit: why a URL host that is an address (or a localhost name) is refused, or None.
        Other names are checked when a delivery resolves them. A host that is no host name is refused."""
        try:
            host = normalize_host(host)
        except ValueError as exc:
            return str(exc)
        address = literal_address(host)
        if address is None and is_localhost_name(host):
            address = ipaddress.IPv4Address("127.0.0.1")
        return None if address is None else self.refusal(host, address, port)

    def problems(self) -> list[tuple[str, str]]:
        """(entry, why it matches nothing plausible) for the warning at start; names are checked by DNS apart."""
        found = list(self.invalid)
        for entry in self.allow:
            if entry.port is not None and entry.port in self.own_ports:
                found.append((entry.text, f"port {entry.port} is one of Kairos's own listening ports, always refused"))
            if entry.network is None:
                continue
            net = entry.network
            if net.prefixlen == 0:
                found.append((entry.text, "allows every address: the egress policy no longer protects anything"))
            elif net.num_addresses == 1 and net.network_address in METADATA:
                found.append((entry.text, "a cloud metadata address, always refused"))
            elif net.num_addresses == 1 and (net.network_address.is_unspecified or net.network_address.is_multicast):
                found.append((entry.text, "not a unicast address: nothing can be delivered to it"))
            elif (
                address_kind(net.network_address) is None
                and address_kind(net.broadcast_address) is None
                and not embedded_ipv4(net.network_address)
            ):
                found.append((entry.text, "public: the policy allows it anyway, the entry changes nothing"))
        return found


@lru_cache(maxsize=16)
def cached_policy(
    entries: tuple[str, ...], own_ports: frozenset[int], own_addresses: frozenset[IPAddress]
) -> EgressPolicy:
    """One parsed policy per configuration (the API validates every submitted URL against it)."""
    return EgressPolicy.from_allow_list(entries, own_ports=own_ports, own_addresses=own_addresses)
