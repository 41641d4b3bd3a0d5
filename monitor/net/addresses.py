"""The address policy of the fetch stage: which IP addresses may be fetched.

Link-local and cloud metadata addresses are never fetched; private, loopback and other
non-global addresses only when the caller allows them (``monitor.core.ipranges`` judges each
address). Hosts are resolved and every address is checked before a connection is opened.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from monitor.core.errors import FetchError
from monitor.core.ipranges import is_blocked_address, is_private_address, literal_address

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
