"""The HTTP front under load, on 127.0.0.1: many scrapers at once, idle sockets, slow
senders and slow readers (docs/serving.md, "Limits").

Nothing here asserts a duration: each test asserts that every client is answered or
cut off as it should be, and nothing hangs (pytest-timeout bounds every test; each
client has its own socket timeout). The latencies are printed (``-s``) for the
record; bench/http_load.py measures them at 1,000 containers.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from exporter.server import App
from exporter.web.listen import bind as bind_address
from exporter.web.listen import parse_listen_address
from exporter.web.transport import HTTPServer, Limits

from .web_support import raise_fd_limit, raw_get, running, wait_closed

pytestmark = pytest.mark.timeout(180)
PROMETHEUS = (
    "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n"
    "Accept-Encoding: gzip\r\n"
)


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def scrape_all(port: int, n: int) -> list[tuple[int, float]]:
    """``n`` scrapes released at the same instant, each on its own connection."""
    barrier = threading.Barrier(n)

    def one(_: int) -> tuple[int, float]:
        barrier.wait(timeout=60)
        status, _h, body, took = raw_get("127.0.0.1", port, headers=PROMETHEUS, timeout=60)
        assert body
        return status, took

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_200_simultaneous_scrapes_are_all_answered(tmp_path: Path) -> None:
    raise_fd_limit()
    with running(tmp_path) as server:
        results = scrape_all(server.port, 200)
        stats = server.http.stats
    assert [s for s, _ in results] == [200] * 200
    times = [t for _, t in results]
    print(
        f"\n200 simultaneous scrapes: p50 {percentile(times, 0.5) * 1e3:.1f} ms, "
        f"p99 {percentile(times, 0.99) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms"
    )
    assert stats.responses[200] >= 200 and stats.closed["refused"] == 0


def open_idle(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        out.append(s)
    return out


def test_500_idle_sockets_do_not_starve_a_scrape_and_are_cut_off(tmp_path: Path) -> None:
    raise_fd_limit()
    limits = Limits(header_timeout=3.0)
    with running(tmp_path, limits=limits) as server:
        idle = open_idle(server.port, 500)
        try:
            status, _, body, took = raw_get("127.0.0.1", server.port, timeout=30)
            assert status == 200 and b"contention_build_info" in body
            print(f"\nfresh scrape with 500 idle sockets open: {took * 1e3:.1f} ms")
            # None of them ever sent a request: each is closed after header_timeout.
            with ThreadPoolExecutor(50) as pool:
                closed = list(pool.map(lambda s: wait_closed(s, 30), idle))
            assert all(closed)
        finally:
            for s in idle:
                s.close()
        assert server.http.stats.closed["header_timeout"] >= 500
        assert server.http.stats.responses[200] >= 1


def test_slowloris_is_cut_off_while_others_are_served(tmp_path: Path) -> None:
    """Clients that keep trickling header bytes never finish a request: the head is due
    within header_timeout of the connection, however busy the sender looks."""
    limits = Limits(header_timeout=1.5)
    with running(tmp_path, limits=limits) as server:
        slow = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(20)]
        stop = threading.Event()
        cut: list[bool] = []

        def trickle(s: socket.socket) -> None:
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                while not stop.is_set():
                    s.sendall(b"X-a: b\r\n")
                    time.sleep(0.1)
            except OSError:
                cut.append(True)  # the server closed it

        threads = [threading.Thread(target=trickle, args=(s,)) for s in slow]
        for t in threads:
            t.start()
        try:
            for _ in range(5):
                status, *_ = raw_get("127.0.0.1", server.port, timeout=30)
                assert status == 200
            for t in threads:
                t.join(timeout=30)
            assert len(cut) == 20
        finally:
            stop.set()
            for s in slow:
                s.close()
        assert server.http.stats.closed["header_timeout"] >= 20


def test_a_kept_alive_connection_is_closed_when_idle(tmp_path: Path) -> None:
    limits = Limits(idle_timeout=0.5)
    with running(tmp_path, limits=limits) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        with s:
            for _ in range(3):  # the same connection serves several requests
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                data = b""
                while b"ok\n" not in data:
                    chunk = s.recv(4096)
                    assert chunk
                    data += chunk
                assert data.startswith(b"HTTP/1.1 200")
            assert wait_closed(s, 30)
        assert server.http.stats.closed["idle_timeout"] == 1


def test_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    with (
        running(tmp_path) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=30) as s,
    ):
        s.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    codes = [int(c) for c in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]
    assert codes == [200, 404, 200]


def big_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    body = b"x" * (64 << 20) if environ["PATH_INFO"] == "/big" else b"ok\n"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def test_a_client_that_does_not_read_is_cut_off(tmp_path: Path) -> None:
    """A slow reader of a 64 MiB answer holds no thread and is closed after
    write_timeout; the answer is handed to the socket in chunks, not copied whole."""
    socks = bind_address(parse_listen_address("127.0.0.1:0"))
    http = HTTPServer(big_app, socks, Limits(write_timeout=1.0, workers=2))
    http.start()
    port = socks[0].getsockname()[1]
    try:
        slow = []
        for _ in range(4):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(30)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            slow.append(s)
        for _ in range(10):  # two workers, four stalled readers: still answered
            status, _, body, _ = raw_get("127.0.0.1", port, "/small", timeout=30)
            assert status == 200 and body == b"ok\n"
        deadline = time.monotonic() + 60
        while http.stats.closed["write_timeout"] < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http.stats.closed["write_timeout"] == 4
        for s in slow:
            s.close()
    finally:
        http.stop()


def test_at_the_connection_limit_the_longest_idle_makes_room(tmp_path: Path) -> None:
    limits = Limits(max_connections=40)
    with running(tmp_path, limits=limits) as server:
        idle = open_idle(server.port, 60)
        try:
            status, *_ = raw_get("127.0.0.1", server.port, timeout=30)
            assert status == 200
            # The first ones opened were closed to admit the later ones.
            assert wait_closed(idle[0], 10)
            assert server.http.stats.closed["evicted"] >= 20
            assert server.http.stats.open <= 40
        finally:
            for s in idle:
                s.close()


class Recorder:
    """A WSGI app that says which requests answer at once and records its threads."""

    def __init__(self) -> None:
        self.threads: dict[str, str] = {}

    def answers_now(self, environ: dict[str, Any]) -> bool:
        return bool(environ["PATH_INFO"] == "/ready")

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.threads[environ["PATH_INFO"]] = threading.current_thread().name
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
        return [b"ok\n"]


def test_ready_answers_skip_the_worker_threads() -> None:
    """Bytes at hand are sent from the loop thread; work goes to a worker."""
    socks = bind_address(parse_listen_address("127.0.0.1:0"))
    app = Recorder()
    http = HTTPServer(app, socks, Limits(workers=2))
    http.start()
    try:
        port = socks[0].getsockname()[1]
        for path in ("/ready", "/work"):
            assert raw_get("127.0.0.1", port, path, timeout=30)[0] == 200
    finally:
        http.stop()
    assert app.threads == {"/ready": "http", "/work": "http_0"}


def test_a_rendered_scrape_answers_now(tmp_path: Path) -> None:
    with running(tmp_path) as server:
        app = server.http.app
        assert isinstance(app, App)
        env = {"PATH_INFO": "/metrics", "HTTP_ACCEPT": "", "HTTP_ACCEPT_ENCODING": "gzip"}
        assert app.answers_now(env) is False  # not rendered yet
        raw_get("127.0.0.1", server.port, headers="Accept-Encoding: gzip\r\n")
        assert app.answers_now(env) is True
        assert app.answers_now({"PATH_INFO": "/healthz"}) is True


def test_worker_threads_are_bounded(tmp_path: Path) -> None:
    raise_fd_limit()
    limits = Limits(workers=3)
    with running(tmp_path, limits=limits) as server:
        before = threading.active_count()
        results = scrape_all(server.port, 100)
        assert all(s == 200 for s, _ in results)
        http_threads = [t for t in threading.enumerate() if t.name.startswith("http_")]
        assert 1 <= len(http_threads) <= 3
        del before


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-big: " + b"b" * 40000 + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405),
    ],
    ids=["garbage", "long-line", "long-headers", "no-host", "post-with-body"],
)
def test_malformed_requests_get_an_answer_and_a_close(
    tmp_path: Path, request_bytes: bytes, status: int
) -> None:
    with (
        running(tmp_path) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=30) as s,
    ):
        s.sendall(request_bytes)
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    assert data.startswith(f"HTTP/1.1 {status} ".encode()), data[:100]
