"""The address policy of the fetch stage: which IP addresses may be fetched.

Link-local and cloud metadata addresses are never fetched; private, loopback and other
non-global addresses only when the caller allows them. Hosts are resolved and every address
is checked before a connection is opened.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from monitor.errors import FetchError

__all__ = [
    "Resolver",
    "Vetted",
    "check_address",
    "check_host",
    "is_blocked_address",
    "is_private_address",
    "literal_address",
    "system_resolver",
]

Resolver = Callable[[str, int], Awaitable[list[str]]]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_BLOCKED_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local: AWS, GCP, Azure, OpenStack...
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud's metadata
    ipaddress.ip_network("192.0.0.192/32"),  # Oracle Cloud's metadata
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS metadata over IPv6
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible, still connectable
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT's IPv4-translated form


def _parse(ip: str) -> IPAddress | None:
    try:
        # A zone id ("fe80::1%eth0") says nothing about whether the address is allowed.
        return ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return None


def _embedded_ipv4(addr: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, translated, NAT64,
    6to4), so it is judged the same: a metadata address has no safe IPv6 spelling."""
    if not isinstance(addr, ipaddress.IPv6Address):
        return None
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    # "::" and "::1" are judged as themselves (unspecified, loopback): both private.
    embeds = any(addr in net for net in (_NAT64, _COMPATIBLE, _TRANSLATED))
    if embeds and (int(addr) > 1 or addr not in _COMPATIBLE):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def is_blocked_address(ip: str) -> bool:
    """True for link-local and cloud metadata addresses (in any IPv4-in-IPv6 spelling), which
    are never fetched."""
    addr = _parse(ip)
    if addr is None:
        return True  # not an address at all: refuse rather than guess
    embedded = _embedded_ipv4(addr)
    if embedded is not None:
        addr = embedded
    return _in_blocked(addr)


def _in_blocked(addr: IPAddress) -> bool:
    return any(addr in net for net in _BLOCKED_NETWORKS if addr.version == net.version)


def is_private_address(ip: str) -> bool:
    """True for loopback, RFC 1918, unique-local, shared and other non-global addresses."""
    addr = _parse(ip)
    if addr is None:
        return True
    embedded = _embedded_ipv4(addr)
    if embedded is not None:
        addr = embedded
    return (
        not addr.is_global
        or _in_blocked(addr)
        or addr.is_private
        or addr.is_loopback
        or addr.is_multicast
        or addr.is_reserved
        or addr.is_unspecified
    )


def literal_address(host: str) -> str | None:
    """The IP address a URL host spells literally, including inet_aton forms like ``2852039166``."""
    addr = _parse(host.strip("[]"))
    if addr is not None:
        return str(addr)
    try:
        # Connecting to "0x7f.1" or "2852039166" works, so they must be judged as the address.
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


def check_address(ip: str, *, url: str, allow_private: bool) -> None:
    """Raise ``FetchError(address-blocked)`` if the policy forbids ``ip`` for ``url``."""
    if is_blocked_address(ip):
        raise FetchError(
            "address-blocked",
            f"refused to fetch {url}: {ip} is a link-local or metadata address",
            permanent=True,
        )
    if not allow_private and is_private_address(ip):
        raise FetchError(
            "address-blocked",
            f"refused to fetch {url}: {ip} is a private or loopback address "
            "(allow_private is off for this target)",
            permanent=True,
        )


@dataclass(frozen=True, slots=True)
class Vetted:
    """The addresses of a host that passed the policy, and the policy that judged them.

    The connection goes to these addresses and the name is never resolved again: a second
    answer (DNS rebinding) could point anywhere.
    """

    addresses: tuple[str, ...]
    allow_private: bool

    def allows(self, ip: str) -> bool:
        """Whether the same policy lets ``ip`` through (a kept-alive connection's peer)."""
        return not is_blocked_address(ip) and (self.allow_private or not is_private_address(ip))


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host``, in its order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = str(sockaddr[0])
        if ip not in addresses:
            addresses.append(ip)
    return addresses


async def check_host(
    host: str, port: int, *, url: str, allow_private: bool, resolver: Resolver
) -> Vetted:
    """Resolve ``host`` once and check every address; the addresses to connect to, or
    ``FetchError``."""
    literal = literal_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = await resolver(host, port)
        except (OSError, ValueError) as exc:  # ValueError: the IDNA codec refuses a label
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise FetchError("connect", f"cannot resolve {host} for {url}: {reason}") from None
        if not addresses:
            raise FetchError("connect", f"cannot resolve {host} for {url}: no addresses")
    # Every address must pass: the connection may go to any of them.
    for ip in addresses:
        check_address(ip, url=url, allow_private=allow_private)
    return Vetted(tuple(addresses), allow_private)


async def is_private_target(url: str) -> bool:
    """Whether a target's own URL is on a private or loopback address."""
    host = urlsplit(url).hostname or ""
    literal = literal_address(host)
    if literal is not None:
        return is_private_address(literal)
    try:
        addresses = await system_resolver(host, 0)
    except (OSError, ValueError):  # unresolvable here: the fetch will report it
        return False
    return any(is_private_address(ip) for ip in addresses)
