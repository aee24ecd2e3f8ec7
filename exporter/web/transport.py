"""The HTTP/1.1 server: one asyncio loop for every connection, a few threads for answers.

Why not a thread per connection (the standard library's threaded servers, and
prometheus_client's own): an idle or slow client then holds a thread for as long as
it likes, and a burst of scrapers overflows a 5-deep accept queue. Here:

* the accept queue is as deep as the kernel allows (``listen.DEFAULT_BACKLOG``);
* a connection costs a socket and a little memory while it waits, never a thread:
  the loop reads requests (h11 parses them), TLS handshakes included;
* a connection must deliver its request head within ``header_timeout`` of arriving
  (or of the first byte of a kept-alive request): slow senders are cut off; a
  kept-alive connection with no new request for ``idle_timeout`` is closed, and so is
  one that takes longer than ``write_timeout`` to read its answer;
* at ``max_connections`` the connection that has waited longest without a request is
  closed to admit a new one, so idle sockets cannot lock a scraper out;
* ``workers`` threads call the WSGI application when it has work to do; an app that
  says a request ``answers_now`` (bytes already rendered with the pass: the usual
  scrape) is answered on the loop thread, saving two thread handoffs, which cost up to
  the interpreter's switch interval each while a pass renders; bcrypt checks have a
  thread of their own (``auth``).

Each closed-by-us connection is counted by reason, each answer by status code.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import logging
import resource
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

import h11

from .auth import Authenticator
from .config import WebConfig, WebConfigSource
from .listen import DEFAULT_BACKLOG
from .tls import san_allowed

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
CHUNK = 64 * 1024  # body bytes handed to the socket at a time (bounded buffering)
READ = 64 * 1024
# Paths served without basic auth (TLS still applies): the kubelet's probes cannot
# send credentials, and "ok" / "stale" tells nothing worth protecting.
AUTH_EXEMPT = frozenset({"/healthz"})
CLOSE_REASONS = (
    "header_timeout",  # the request head did not arrive in time (slow or silent client)
    "idle_timeout",  # kept alive, no new request
    "write_timeout",  # the client did not read its answer in time
    "evicted",  # waiting without a request when max_connections was reached
    "refused",  # max_connections reached and every connection busy
    "bad_request",  # not HTTP/1.x, or a head too large
    "tls_error",  # the TLS handshake failed (no or bad client certificate, ...)
    "tls_san",  # a verified client certificate without an allowed SAN
)


@dataclass(frozen=True, slots=True)
class Limits:
    workers: int = 8
    max_connections: int = 1000
    header_timeout: float = 10.0
    idle_timeout: float = 120.0  # above Prometheus' usual scrape intervals
    write_timeout: float = 60.0
    max_head_bytes: int = 32 * 1024
    backlog: int = DEFAULT_BACKLOG


class Stats:
    """Counters, written by the loop thread only."""

    def __init__(self) -> None:
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)
        self.responses: collections.Counter[int] = collections.Counter()
        self.open = 0


class _Conn:
    __slots__ = ("peer", "task", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.task = asyncio.current_task()

    def abort(self) -> None:
        self.writer.transport.abort()


class _Protocol(asyncio.StreamReaderProtocol):
    """With TLS, nothing is read before the handshake takes the socket over (bytes
    already in a stream buffer would be lost to it)."""

    def __init__(self, hold: bool, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hold = hold

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._hold and isinstance(transport, asyncio.ReadTransport):
            transport.pause_reading()  # start_tls resumes it
        super().connection_made(transport)


@dataclass(slots=True)
class _Answer:
    status: int
    reason: bytes
    headers: list[tuple[str, str]]
    body: bytes


class _Limiter:
    """A token bucket: ``burst`` requests at once, then one per ``interval_s``."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.at = 0.0
        self.key: tuple[float, int] | None = None

    def allow(self, interval_s: float, burst: int, now: float) -> bool:
        if self.key != (interval_s, burst):
            self.key, self.tokens, self.at = (interval_s, burst), float(burst), now
        self.tokens = min(float(burst), self.tokens + (now - self.at) / interval_s)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class HTTPServer:
    def __init__(
        self,
        app: WSGIApp,
        sockets: list[Any],
        limits: Limits | None = None,
        config: WebConfigSource | None = None,
    ) -> None:
        self.app = app
        self.sockets = sockets
        self.limits = limits = limits or Limits()
        self.max_connections = _connection_cap(limits.max_connections)
        self.config = config
        self.stats = Stats()
        self.auth = Authenticator()
        self._limiter = _Limiter()
        self._tls = config is not None and config.config.tls is not None
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="http")
        self._bcrypt_pool = ThreadPoolExecutor(1, thread_name_prefix="http-auth")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="http", daemon=True)
        self._servers: list[asyncio.base_events.Server] = []
        self._conns: dict[_Conn, None] = {}
        self._waiting: collections.OrderedDict[_Conn, None] = collections.OrderedDict()
        self._date = (0, "")

    @property
    def tls(self) -> bool:
        return self._tls

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)

    async def _start(self) -> None:
        for sock in self.sockets:
            srv = await self._loop.create_server(
                self._protocol, sock=sock, backlog=self.limits.backlog
            )
            self._servers.append(srv)

    def _protocol(self) -> _Protocol:
        reader = asyncio.StreamReader(limit=READ, loop=self._loop)
        return _Protocol(self._tls, reader, self._connection, loop=self._loop)

    def stop(self) -> None:
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
        for s in self.sockets:
            s.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._bcrypt_pool.shutdown(wait=False, cancel_futures=True)

    async def _shutdown(self) -> None:
        for srv in self._servers:
            srv.close()
        tasks = [c.task for c in self._conns if c.task is not None]
        for c in list(self._conns):
            c.abort()
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    # -- connections ----------------------------------------------------------------------

    def _admit(self, conn: _Conn) -> bool:
        if len(self._conns) >= self.max_connections:
            if not self._waiting:
                self.stats.closed["refused"] += 1
                return False
            victim, _ = self._waiting.popitem(last=False)
            self._forget(victim)
            victim.abort()
            self.stats.closed["evicted"] += 1
        self._conns[conn] = None
        self._waiting[conn] = None
        self.stats.open = len(self._conns)
        return True

    def _forget(self, conn: _Conn) -> None:
        self._conns.pop(conn, None)
        self._waiting.pop(conn, None)
        self.stats.open = len(self._conns)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        if not self._admit(conn):
            conn.abort()
            return
        try:
            await self._serve(conn, reader, writer)
        except (ConnectionError, TimeoutError, ssl.SSLError, asyncio.IncompleteReadError):
            pass  # the peer went away, or was cut off: counted where it was decided
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug here must cost this connection only
            log.error("http: connection from %s failed: %s", conn.peer, e, exc_info=True)
        finally:
            self._forget(conn)
            conn.abort()

    async def _serve(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        loop = self._loop
        deadline = loop.time() + self.limits.header_timeout
        config = self.config.current() if self.config is not None else None
        if self._tls and (
            config is None
            or config.tls is None
            or not await self._handshake(conn, config, deadline)
        ):
            return
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        first = True
        while True:
            if not first:
                deadline = loop.time() + self.limits.idle_timeout
            request = await self._read_request(h, reader, writer, deadline, first)
            if request is None:
                return
            self._waiting.pop(conn, None)
            if self.config is not None:
                config = self.config.current()
            answer = await self._answer(request, config, conn)
            if not await self._write(h, writer, request, answer):
                return
            if h.our_state is not h11.DONE or h.their_state is not h11.DONE:
                return
            h.start_next_cycle()
            self._waiting[conn] = None
            first = False

    async def _handshake(self, conn: _Conn, config: WebConfig, deadline: float) -> bool:
        assert config.tls is not None
        writer = conn.writer
        try:
            async with asyncio.timeout_at(deadline):
                await writer.start_tls(config.tls.context)
        except TimeoutError:
            self.stats.closed["header_timeout"] += 1
            return False
        except (ssl.SSLError, ConnectionError, OSError) as e:
            if conn in self._conns:  # not closed by us (evicted) meanwhile
                self.stats.closed["tls_error"] += 1
            log.debug(
                "http: TLS handshake with %s failed: %s", writer.get_extra_info("peername"), e
            )
            return False
        if config.tls.allowed_sans and not san_allowed(
            writer.get_extra_info("peercert"), config.tls.allowed_sans
        ):
            self.stats.closed["tls_san"] += 1
            log.debug("http: client certificate without an allowed SAN, closing")
            return False
        return True

    async def _read_request(
        self,
        h: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        deadline: float,
        first: bool,
    ) -> tuple[h11.Request, bool] | None:
        """The next request and whether it has a body (not read: we answer and close),
        or None when the connection is over."""
        got_bytes = False
        line_seen = False
        request: h11.Request | None = None
        while True:
            try:
                event = h.next_event()
            except h11.RemoteProtocolError as e:
                status = e.error_status_hint
                if status == 431 and not line_seen:
                    status = 414  # the request line alone is too long
                self.stats.closed["bad_request"] += 1
                await self._error(writer, status, self._date_header())
                return None
            if isinstance(event, h11.Request):
                status = self._oversized(event)
                if status:  # h11 only bounds heads that arrive in pieces
                    self.stats.closed["bad_request"] += 1
                    await self._error(writer, status, self._date_header())
                    return None
                request = event
                continue
            if request is not None:
                # EndOfMessage: no body. Anything else: a body we will not read.
                return request, not isinstance(event, h11.EndOfMessage)
            if isinstance(event, h11.ConnectionClosed):
                return None
            if event is not h11.NEED_DATA:
                return None
            try:
                async with asyncio.timeout_at(deadline):
                    data = await reader.read(READ)
            except TimeoutError:
                waited_idle = not first and not got_bytes
                self.stats.closed["idle_timeout" if waited_idle else "header_timeout"] += 1
                return None
            if data and not got_bytes and not first:
                # A kept-alive request began: its head is due within header_timeout.
                deadline = self._loop.time() + self.limits.header_timeout
            got_bytes = got_bytes or bool(data)
            line_seen = line_seen or b"\n" in data
            h.receive_data(data)

    def _oversized(self, req: h11.Request) -> int:
        """414 or 431 when a complete head is over ``max_head_bytes``, else 0."""
        limit = self.limits.max_head_bytes
        if len(req.target) > limit:
            return 414
        size = len(req.target) + sum(len(k) + len(v) + 4 for k, v in req.headers)
        return 431 if size > limit else 0

    async def _error(self, writer: asyncio.StreamWriter, status: int, date: str) -> None:
        reason = _REASONS.get(status, "Bad Request").encode()
        body = reason + b"\n"
        head = (
            b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"Date: %s\r\nConnection: close\r\n\r\n" % (status, reason, len(body), date.encode())
        )
        self.stats.responses[status] += 1
        writer.write(head + body)
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                await writer.drain()
        except (TimeoutError, ConnectionError):
            pass

    async def _answer(
        self, request: tuple[h11.Request, bool], config: WebConfig | None, conn: _Conn
    ) -> _Answer:
        req, _ = request
        extra = list(config.headers) if config is not None else []
        if config is not None and config.rate_limit is not None:
            rl = config.rate_limit
            if not self._limiter.allow(rl.interval_s, rl.burst, time.monotonic()):
                return _plain(429, "Too Many Requests", extra)
        environ = self._environ(req, conn, config)
        if config is not None and config.users and environ["PATH_INFO"] not in AUTH_EXEMPT:
            header = environ.get("HTTP_AUTHORIZATION")
            ok = self.auth.cached(config.users, header)
            if ok is None:
                ok = await self._loop.run_in_executor(
                    self._bcrypt_pool, self.auth.verify, config.users, header
                )
            if not ok:
                return _plain(401, "Unauthorized", [*extra, ("WWW-Authenticate", "Basic")])
        answers_now = getattr(self.app, "answers_now", None)
        if answers_now is not None and answers_now(environ):
            answer = self._call(environ)  # bytes at hand: no thread hop (GIL handoffs)
        else:
            answer = await self._loop.run_in_executor(self._pool, self._call, environ)
        answer.headers.extend(extra)
        return answer

    def _environ(self, req: h11.Request, conn: _Conn, config: WebConfig | None) -> dict[str, Any]:
        target = req.target
        if not target.startswith(b"/"):  # absolute-form: http://host/path
            _, _, rest = target.partition(b"://")
            target = b"/" + rest.partition(b"/")[2]
        path, _, query = target.partition(b"?")
        peer = conn.peer if isinstance(conn.peer, tuple) else ("", 0)
        env: dict[str, Any] = {
            "REQUEST_METHOD": req.method.decode("ascii", "replace"),
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query.decode("latin-1"),
            "SERVER_PROTOCOL": "HTTP/" + req.http_version.decode("ascii", "replace"),
            "REMOTE_ADDR": str(peer[0]),
            "REMOTE_PORT": str(peer[1]),
            "SCRIPT_NAME": "",
            "wsgi.url_scheme": "https" if self._tls else "http",
            "wsgi.version": (1, 0),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in req.headers:
            key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            text = value.decode("latin-1")
            env[key] = f"{env[key]},{text}" if key in env else text
        return env

    def _call(self, environ: dict[str, Any]) -> _Answer:
        """In a worker thread: the WSGI application's answer, whole."""
        got: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
            got[:] = [status, headers]

        try:
            parts = self.app(environ, start_response)
            body = b"".join(parts)
            status, headers = got
            code, _, reason = status.partition(" ")
            return _Answer(int(code), reason.encode("latin-1"), list(headers), body)
        except Exception as e:
            log.error("http: %s %s failed: %s", environ["REQUEST_METHOD"], environ["PATH_INFO"], e)
            return _plain(500, "Internal Server Error", [])

    async def _write(
        self,
        h: h11.Connection,
        writer: asyncio.StreamWriter,
        request: tuple[h11.Request, bool],
        answer: _Answer,
    ) -> bool:
        req, has_body = request
        headers = [(k, v) for k, v in answer.headers if k.lower() != "date"]
        headers.append(("Date", self._date_header()))
        if has_body:
            headers.append(("Connection", "close"))  # the body is not read: no reuse
        self.stats.responses[answer.status] += 1
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                writer.write(
                    h.send(
                        h11.Response(
                            status_code=answer.status, headers=headers, reason=answer.reason
                        )
                    )
                    or b""
                )
                body = memoryview(answer.body) if req.method != b"HEAD" else memoryview(b"")
                for i in range(0, len(body), CHUNK):
                    for piece in (
                        h.send_with_data_passthrough(h11.Data(data=body[i : i + CHUNK])) or ()
                    ):
                        writer.write(piece)
                    await writer.drain()
                writer.write(h.send(h11.EndOfMessage()) or b"")
                await writer.drain()
        except TimeoutError:
            self.stats.closed["write_timeout"] += 1
            return False
        return True

    def _date_header(self) -> str:
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, email.utils.formatdate(now, usegmt=True))
        return self._date[1]


def _connection_cap(wanted: int) -> int:
    """At most ``wanted`` connections, and fewer when the open files limit (each is a
    file) would not leave room for the exporter's own files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(16, min(wanted, int(soft) - 128))


_REASONS = {400: "Bad Request", 414: "URI Too Long", 431: "Request Header Fields Too Large"}


def _plain(status: int, reason: str, headers: list[tuple[str, str]]) -> _Answer:
    body = (reason + "\n").encode()
    return _Answer(
        status,
        reason.encode(),
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            *headers,
        ],
        body,
    )
