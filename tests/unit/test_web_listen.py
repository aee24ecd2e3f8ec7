"""--web.listen-address: one dual-stack socket for :PORT and [::]:PORT (IPv4 and IPv6
clients both answered), IPv4-only and IPv6-only literals, several addresses, and the
fall-back to IPv4 where the kernel has no IPv6 (docs/serving.md, "Listening")."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from exporter.commands import build_parser
from exporter.web.listen import bind, parse_listen_address

from .web_support import raw_get, running

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        (":10366", "", 10366),
        ("[::]:10366", "", 10366),
        ("0.0.0.0:1", "0.0.0.0", 1),
        ("[::1]:2", "::1", 2),
        ("localhost:3", "localhost", 3),
        ("[fe80::1%lo]:4", "fe80::1%lo", 4),
    ],
)
def test_parse(text: str, host: str, port: int) -> None:
    a = parse_listen_address(text)
    assert (a.host, a.port) == (host, port)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("10366", "host:port"),
        ("::1:10366", "needs brackets"),
        ("[127.0.0.1]:1", "brackets are for IPv6"),
        ("[zz]:1", "not an IPv6 address"),
        ("host:99999", "host:port"),
        ("host:", "host:port"),
    ],
)
def test_parse_errors(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_listen_address(text)


def reaches(host: str, port: int) -> bool:
    try:
        return raw_get(host, port, "/healthz", timeout=10)[0] == 200
    except OSError:
        return False


@pytest.mark.parametrize("addr", [":0", "[::]:0"])
def test_every_address_is_both_families(tmp_path: Path, addr: str) -> None:
    with running(tmp_path, addr) as server:
        (sock,) = server.sockets
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert reaches("127.0.0.1", server.port) and reaches("[::1]", server.port)
        assert server.addresses == [f"[::]:{server.port} (IPv4 and IPv6)"]


def test_literals_are_one_family(tmp_path: Path) -> None:
    with running(tmp_path, ["0.0.0.0:0", "[::1]:0"]) as server:
        v4, v6 = (s.getsockname()[1] for s in server.sockets)
        assert reaches("127.0.0.1", v4) and not reaches("[::1]", v4)
        assert reaches("[::1]", v6) and not reaches("127.0.0.1", v6)


def test_a_taken_port_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    with running(tmp_path, "127.0.0.1:0") as server, pytest.raises(OSError) as e:
        bind(parse_listen_address(f"127.0.0.1:{server.port}"))
    assert e.value.errno == errno.EADDRINUSE


def test_the_flag_repeats_and_defaults_to_every_address() -> None:
    p = build_parser()
    assert p.parse_args([]).listen is None  # run: [":10366"]
    a = p.parse_args(["--web.listen-address=127.0.0.1:1", "--web.listen-address=[::1]:1"])
    assert a.listen == ["127.0.0.1:1", "[::1]:1"]


# IPv6 cannot be taken away from this kernel (a kernel booted with ipv6.disable=1 has
# no AF_INET6 sockets at all): the two ways it shows are simulated here, and only them.


def test_no_ipv6_sockets_falls_back_to_ipv4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: False)
    with caplog.at_level(logging.INFO), running(tmp_path, ":0") as server:
        (sock,) = server.sockets
        assert sock.family == socket.AF_INET and reaches("127.0.0.1", server.port)
    assert any("listening on IPv4 only" in r.getMessage() for r in caplog.records)


def test_ipv6_refused_at_bind_falls_back_to_ipv4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.create_server

    def no_v6(address: Any, *, family: int = socket.AF_INET, **kw: Any) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(address, family=family, **kw)

    monkeypatch.setattr(socket, "create_server", no_v6)
    with running(tmp_path, ":0") as server:
        assert server.sockets[0].family == socket.AF_INET
        assert reaches("127.0.0.1", server.port)
