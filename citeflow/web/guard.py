"""The network guard: which URLs the fetcher may connect to, checked before every connection.

Page text and search results are untrusted, so a URL from them could point at the machine itself,
the intranet or a cloud metadata service. Only http and https are allowed, and every address the
host resolves to must be public, unless the exact host:port is on the allowlist
(CITEFLOW_ALLOW_HOSTS). The fetcher calls `check_url` for the first URL and again for every
redirect hop, so a public page cannot bounce a request inward, and it connects to the very address
that was checked, so a name that resolves differently a moment later (DNS rebinding) changes nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from citeflow.errors import FetchError
from citeflow.urls import DEFAULT_PORTS

ALLOWED_SCHEMES = frozenset({"http", "https"})
HOLDS = "nothing was connected to"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


class FetchRefused(FetchError):
    """A URL policy forbids fetching (scheme, address, robots.txt, open breaker): a skip, not a failure."""


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, as the operating system would connect to it."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def address_problem(address: IPAddress) -> str | None:
    """Why connecting to `address` is refused, or None when it is a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    # Most specific first: is_private also covers loopback, link-local and reserved ranges.
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("not globally routable", not address.is_global),
    )
    for name, hit in checks:
        if hit:
            return f"resolves to {name} address {address}"
    return None


@dataclass(frozen=True)
class Target:
    """A URL that may be fetched, and the checked address to connect to for it."""

    url: httpx.URL
    address: str


@dataclass(frozen=True)
class Guard:
    allow_hosts: frozenset[tuple[str, int]] = frozenset()
    resolver: Resolver = resolve

    def check_url(self, url: str) -> Target:
        """The parsed URL and the address to connect to when it may be fetched; FetchError naming the
        reason otherwise. The URL is parsed with httpx, the library that will connect."""
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as error:
            raise FetchRefused(url, f"not a valid URL ({error})", HOLDS) from error
        if parsed.scheme not in ALLOWED_SCHEMES:
            raise FetchRefused(url, f"scheme {parsed.scheme or '(none)'!r} is refused; only http(s)", HOLDS)
        host = parsed.host.lower()
        if not host:
            raise FetchRefused(url, "has no host", HOLDS)
        port = parsed.port or DEFAULT_PORTS[parsed.scheme]  # httpx leaves a scheme's default port None
        try:
            addresses = self.resolver(host, port)
        except (socket.gaierror, UnicodeError) as error:
            raise FetchError(url, f"host {host!r} does not resolve ({error})", HOLDS) from error
        if not addresses:
            raise FetchError(url, f"host {host!r} resolves to no address", HOLDS)
        if (host, port) in self.allow_hosts:
            return Target(parsed, addresses[0])
        for text in addresses:
            problem = address_problem(ipaddress.ip_address(text.split("%", 1)[0]))
            if problem:
                raise FetchRefused(
                    url, f"{problem}; add {host}:{port} to CITEFLOW_ALLOW_HOSTS to admit it", HOLDS
                )
        return Target(parsed, addresses[0])
