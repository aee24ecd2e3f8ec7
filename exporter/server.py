"""HTTP front: ``/metrics``, ``/findings``, ``/healthz`` and a landing page at ``/``.

A small threaded WSGI server from the standard library. Every request takes the
published pass once (``Exposition.current()``) and answers from it: ``/metrics`` and
``/findings`` are bytes made with the pass, so a scrape does no file I/O, never mixes
two passes, and costs a copy of the bytes (``exporter.exposition.published``).
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from . import __version__
from .cgroupfs.mode import NodeFacts
from .exposition.published import Exposition

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
DEMO_HINT = (
    "To see a finding happen on purpose, run a contention lab from a source checkout: "
    "contention-exporter demo --list (docs/labs.md)."
)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


def parse_listen_address(addr: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address must be host:port or :port, got {addr!r}")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


class App:
    def __init__(
        self,
        exposition: Exposition,
        facts: NodeFacts,
        interval: float,
        status: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.exposition = exposition
        self.facts = facts
        self.interval = interval
        self.status = status or (lambda: {})

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        if path == "/metrics":
            body = self._metrics(environ, start_response)
        elif path == "/healthz":
            body = self._health(start_response)
        elif path == "/findings":
            body = self._findings(start_response)
        elif path == "/":
            body = self._landing(start_response)
        else:
            body = self._send(start_response, "404 Not Found", "text/plain", b"not found\n")
        return [] if method == "HEAD" else body

    @staticmethod
    def _send(
        start_response: StartResponse,
        status: str,
        ctype: str,
        body: bytes,
        extra: Iterable[tuple[str, str]] = (),
    ) -> list[bytes]:
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), *extra]
        start_response(status, headers)
        return [body]

    def _metrics(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        r = self.exposition.serve(environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"))
        extra = [("Vary", "Accept, Accept-Encoding")]
        if r.gzipped:
            extra.append(("Content-Encoding", "gzip"))
        return self._send(start_response, "200 OK", r.content_type, r.body, extra)

    def _health(self, start_response: StartResponse) -> list[bytes]:
        result = self.exposition.current().result
        if result is None:
            return self._send(
                start_response, "503 Service Unavailable", "text/plain", b"first pass pending\n"
            )
        age = time.time() - result.at
        if age > max(3 * self.interval, 30):
            msg = f"stale: last sampler pass {age:.0f}s ago\n".encode()
            return self._send(start_response, "503 Service Unavailable", "text/plain", msg)
        return self._send(start_response, "200 OK", "text/plain", b"ok\n")

    def _findings(self, start_response: StartResponse) -> list[bytes]:
        pub = self.exposition.current()
        status = "200 OK" if pub.result is not None else "503 Service Unavailable"
        return self._send(start_response, status, "application/json", pub.findings_json)

    def _landing(self, start_response: StartResponse) -> list[bytes]:
        result = self.exposition.current().result
        facts = self.facts
        tracked = len(result.snapshot.containers) if result else None
        findings = len(result.findings) if result else None
        rows = [
            ("cgroup mode", facts.mode.value),
            ("compute supported", "yes" if facts.supported else f"no: {facts.reason}"),
            ("PSI", "yes" if facts.psi else f"no: {facts.psi_reason}"),
            ("kernel BTF", "yes" if facts.btf else "no"),
            ("tracked cgroups", "first pass pending" if tracked is None else str(tracked)),
            ("findings", "first pass pending" if findings is None else str(findings)),
            ("sample interval", f"{self.interval:g}s"),
            *self.status().items(),
        ]
        table = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows
        )
        hint = ""
        if tracked == 0 or findings == 0:
            what = "Nothing is tracked on this host yet." if tracked == 0 else "No findings now."
            hint = f"<p>{html.escape(what)} {html.escape(DEMO_HINT)}</p>"
        page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>contention-exporter</title></head>
<body><h1>contention-exporter {html.escape(__version__)}</h1>
<p>Is a container starved of CPU or memory, and by whom?</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus)</li>
<li><a href="/findings">/findings</a> (JSON)</li>
<li><a href="/healthz">/healthz</a></li></ul>
<table>{table}</table>{hint}</body></html>
"""
        return self._send(start_response, "200 OK", "text/html; charset=utf-8", page.encode())


class Server:
    def __init__(self, app: App, address: str) -> None:
        host, port = parse_listen_address(address)
        self.httpd = make_server(
            host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_port)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
