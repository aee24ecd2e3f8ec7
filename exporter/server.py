"""HTTP front: ``/metrics``, ``/findings``, ``/healthz`` and a landing page at ``/``.

A small threaded WSGI server from the standard library; ``/metrics`` is served by
prometheus_client's WSGI app (content negotiation, gzip, OpenMetrics), the rest here.
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from . import __version__
from .sampler import Sampler

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
FindingsFn = Callable[[], dict[str, Any]]  # the whole /findings document


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
        sampler: Sampler,
        registry: CollectorRegistry,
        findings: FindingsFn | None = None,
        status: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.sampler = sampler
        self.metrics_app = make_wsgi_app(registry)
        self.findings = findings
        self.status = status or (lambda: {})

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return self.metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            return self._health(start_response)
        if path == "/findings":
            return self._findings(start_response)
        if path == "/":
            return self._landing(start_response)
        return self._send(start_response, "404 Not Found", "text/plain", b"not found\n")

    @staticmethod
    def _send(start_response: StartResponse, status: str, ctype: str, body: bytes) -> list[bytes]:
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    def _health(self, start_response: StartResponse) -> list[bytes]:
        snap = self.sampler.snapshot()
        if snap is None:
            return self._send(
                start_response, "503 Service Unavailable", "text/plain", b"first pass pending\n"
            )
        age = time.time() - snap.taken_at
        if age > max(3 * self.sampler.interval, 30):
            msg = f"stale: last sampler pass {age:.0f}s ago\n".encode()
            return self._send(start_response, "503 Service Unavailable", "text/plain", msg)
        return self._send(start_response, "200 OK", "text/plain", b"ok\n")

    def _findings(self, start_response: StartResponse) -> list[bytes]:
        if self.findings is None:
            body = json.dumps({"error": "findings are not enabled in this build"}).encode()
            return self._send(start_response, "501 Not Implemented", "application/json", body)
        try:
            doc = self.findings()
        except Exception as e:  # say what failed; never a traceback to the client
            log.error("findings evaluation failed: %s", e)
            body = json.dumps({"error": f"findings evaluation failed: {e}"}).encode()
            return self._send(start_response, "500 Internal Server Error", "application/json", body)
        return self._send(start_response, "200 OK", "application/json", json.dumps(doc).encode())

    def _landing(self, start_response: StartResponse) -> list[bytes]:
        snap = self.sampler.snapshot()
        facts = self.sampler.facts
        rows = [
            ("cgroup mode", facts.mode.value),
            ("compute supported", "yes" if facts.supported else f"no: {facts.reason}"),
            ("PSI", "yes" if facts.psi else f"no: {facts.psi_reason}"),
            ("kernel BTF", "yes" if facts.btf else "no"),
            ("tracked cgroups", str(len(snap.containers)) if snap else "first pass pending"),
            ("sample interval", f"{self.sampler.interval:g}s"),
            *self.status().items(),
        ]
        table = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows
        )
        page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>contention-exporter</title></head>
<body><h1>contention-exporter {html.escape(__version__)}</h1>
<p>Is a container starved of CPU or memory, and by whom?</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus)</li>
<li><a href="/findings">/findings</a> (JSON)</li>
<li><a href="/healthz">/healthz</a></li></ul>
<table>{table}</table></body></html>
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
