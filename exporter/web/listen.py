"""``--web.listen-address`` into listening sockets.

``:PORT`` and ``[::]:PORT`` listen on every address of both families with one
dual-stack socket (IPv4 clients arrive as ``::ffff:a.b.c.d``), so IPv4-only, IPv6-only
and dual-stack clusters can all scrape; where the kernel has no IPv6 they fall back to
IPv4 alone, and say so. ``0.0.0.0:PORT`` is IPv4 only; ``[::1]:PORT`` and other IPv6
literals are IPv6 only; a name (``localhost:PORT``) listens on every address it
resolves to.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The kernel clamps the accept queue to net.core.somaxconn (4096 since Linux 5.4):
# asking for the most lets a burst of scrapers queue instead of retrying SYNs.
DEFAULT_BACKLOG = 4096
# Errors that mean "this host has no IPv6", not "this address is taken".
_NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str  # "" for every address (dual-stack)
    port: int
    text: str  # as given, for messages

    @property
    def wildcard(self) -> bool:
        return self.host == ""


def parse_listen_address(addr: str) -> ListenAddress:
    """``host:port``, ``:port``, ``[v6]:port`` (brackets required around IPv6)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be host:port, :port or [ipv6]:port, got {addr!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ip = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"not an IPv6 address in brackets: {addr!r}") from None
        if ip.version != 6:
            raise ValueError(f"brackets are for IPv6 addresses: {addr!r}")
        if ip.is_unspecified:
            host = ""  # [::] is every address, both families
    elif ":" in host:
        raise ValueError(f"an IPv6 address needs brackets, e.g. [{host}]:{port}")
    return ListenAddress(host, int(port), addr)


def bind(addr: ListenAddress, backlog: int = DEFAULT_BACKLOG) -> list[socket.socket]:
    """Listening sockets for ``addr`` (raises OSError, e.g. address in use)."""
    if addr.wildcard:
        return [_bind_wildcard(addr.port, backlog)]
    infos = socket.getaddrinfo(
        addr.host, addr.port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    out: list[socket.socket] = []
    seen = set()
    try:
        for family, _, _, _, sockaddr in infos:
            if sockaddr in seen:
                continue
            seen.add(sockaddr)
            try:
                out.append(socket.create_server(sockaddr, family=family, backlog=backlog))
            except OSError as e:
                if family == socket.AF_INET6 and e.errno in _NO_IPV6 and len(infos) > 1:
                    log.info("not listening on %s: no IPv6 here (%s)", sockaddr[0], e.strerror)
                    continue
                raise
    except BaseException:
        for s in out:
            s.close()
        raise
    if not out:
        raise OSError(errno.EADDRNOTAVAIL, f"no address to listen on for {addr.text!r}")
    return out


def _bind_wildcard(port: int, backlog: int) -> socket.socket:
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
            )
        except OSError as e:
            if e.errno not in _NO_IPV6:
                raise
            reason = e.strerror
    else:
        reason = "the kernel has no IPv6 sockets"
    log.info("IPv6 unavailable (%s): listening on IPv4 only", reason)
    return socket.create_server(("0.0.0.0", port), family=socket.AF_INET, backlog=backlog)


def describe(sock: socket.socket) -> str:
    """``[::]:10366 (IPv4 and IPv6)``, ``127.0.0.1:10366``, ``[::1]:10366``."""
    host, port = sock.getsockname()[:2]
    if sock.family != socket.AF_INET6:
        return f"{host}:{port}"
    both = host == "::" and not sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
    return f"[{host}]:{port}" + (" (IPv4 and IPv6)" if both else "")
