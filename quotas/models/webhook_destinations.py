"""Where webhooks may send: not to loopback, link-local or private addresses, unless an admin setting allows them.

A webhook makes the portal's workers POST, from inside the network, to a URL someone typed. Without a check, a URL
naming 127.0.0.1, a cloud's metadata service (169.254.169.254) or a host of the private network would have the
portal reach what the network keeps from outside (server-side request forgery). So the host's every address is
checked when a webhook is saved (the API, the admin) and again at each delivery, whose connection goes only to the
addresses it checked: a name that resolves elsewhere by then (DNS rebinding) is caught there. A name that does not
resolve when the webhook is saved is accepted (its delivery checks it).

``QUOTAS_WEBHOOK_ALLOWED_NETWORKS`` (CIDR networks, comma-separated) allows internal addresses all the same, e.g. a
chat bot inside the company network, or 127.0.0.0/8 for the tests' receivers. A refusal is ``ForbiddenDestination``,
Kafka's ``POLICY_VIOLATION``: it names the host and the kind of address, never the address itself.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.request
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
CODE = "POLICY_VIOLATION"

_networks: dict[tuple[str, ...], list[Network]] = {}


class ForbiddenDestination(ValueError):
    """A webhook URL whose host is, or resolves to, an address the portal does not send to."""

    code = CODE


def allowed_networks() -> list[Network]:
    """``QUOTAS_WEBHOOK_ALLOWED_NETWORKS`` as networks (checked when the settings load)."""
    names = tuple(getattr(settings, "QUOTAS_WEBHOOK_ALLOWED_NETWORKS", ()) or ())
    if names not in _networks:
        _networks[names] = [ipaddress.ip_network(name, strict=False) for name in names]
    return _networks[names]


def internal_kind(address: Address) -> str | None:
    """What makes an address internal (``loopback``, ``link-local``, ``private``, ...), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    for kind, internal in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("non-public", not address.is_global),  # shared (100.64.0.0/10), documentation, benchmarking ranges
    ):
        if internal:
            return kind
    return None


def check_addresses(host: str, addresses: Iterable[Address]) -> None:
    """Raise ForbiddenDestination when one of ``host``'s addresses is internal and not in an allowed network."""
    allowed = allowed_networks()
    for address in addresses:
        kind = internal_kind(address)
        if kind is not None and not any(address in network for network in allowed):
            raise ForbiddenDestination(
                f"The webhook's host {host!r} is or resolves to a {kind} address: the portal does not send to "
                "loopback, link-local or private addresses unless QUOTAS_WEBHOOK_ALLOWED_NETWORKS allows them."
            )


def resolve(host: str, port: int) -> list[tuple[socket.AddressFamily, Address, tuple]]:
    """Every address ``host`` has for a TCP connection to ``port`` (a literal address is its own): (family, address,
    sockaddr), in the resolver's order; socket.gaierror when the name does not resolve."""
    found = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])  # an IPv6 scope (%eth0) is not part of it
        found.append((family, address, sockaddr))
    return found


def check_url(url: str) -> None:
    """Refuse a webhook URL whose host is or resolves to a forbidden address (ForbiddenDestination); a name that
    does not resolve now passes (its delivery checks it again)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return  # not a URL: its validator says so
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # a port out of range: the URL validator's to refuse
    try:
        found = resolve(host, port)
    except (OSError, UnicodeError):
        return
    check_addresses(host, [address for _, address, _ in found])


def connect(address: tuple[str, int], timeout: object = None, source_address: tuple[str, int] | None = None
            ) -> socket.socket:
    """A TCP connection to ``(host, port)`` that goes only to addresses checked here (``socket.create_connection``'s
    signature, for http.client): every address is checked first (ForbiddenDestination), then tried in turn."""
    host, port = address
    found = resolve(host, port)
    check_addresses(host, [ip for _, ip, _ in found])
    error: OSError | None = None
    for family, _, sockaddr in found:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if isinstance(timeout, int | float):  # else http.client's "the global default"
                sock.settimeout(timeout)
            if source_address is not None:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as e:
            error = e
            sock.close()
    raise error or OSError(f"{host} has no address")


def opener(url: str, *handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    """A urllib opener (with ``handlers``) whose connections to ``url``'s host go through ``connect``: only to
    addresses checked at that moment. A proxy from the environment is the admin's own and is connected to as it is
    (``check_url`` before the request checks the target then)."""
    target = urlsplit(url).hostname

    def create_connection(address: tuple[str, int], timeout: object = None,
                          source_address: tuple[str, int] | None = None) -> socket.socket:
        if address[0] == target:
            return connect(address, timeout, source_address)
        return socket.create_connection(address, timeout, source_address)  # type: ignore[arg-type]

    class Pinned:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = create_connection

    class PinnedHTTP(Pinned, http.client.HTTPConnection):
        pass

    class PinnedHTTPS(Pinned, http.client.HTTPSConnection):
        pass

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(PinnedHTTP, req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(PinnedHTTPS, req, context=self._context)  # type: ignore[attr-defined]

    return urllib.request.build_opener(HTTPHandler, HTTPSHandler, *handlers)
