"""Which IP addresses the daemon may connect to, judged from the address alone (pure).

Link-local and cloud metadata addresses are never connected to, in any spelling (an IPv4
address inside IPv6, ``inet_aton`` forms such as ``2852039166``); private, loopback and other
non-global addresses only when the caller allows them. ``monitor.net.addresses`` applies this
to every address a host resolves to; the configuration applies it to the addresses a URL
spells literally, so a metadata endpoint fails ``config check``.
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["is_blocked_address", "is_private_address", "literal_address"]

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
