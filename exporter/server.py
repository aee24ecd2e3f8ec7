"""HTTP front: ``/metrics`` (``--web.telemetry-path``), ``/findings``, ``/healthz`` and a
landing page at ``/``.

:class:`App` routes a request (a WSGI application); :class:`Server` serves it on every
listen address through ``exporter.web`` (dual-stack sockets, TLS and basic auth from
``--web.config.file``, bounded threads, connections and timeouts). Every request takes
the published pass once (``Exposition.current()``) and answers from it: ``/metrics``
and ``/findings`` are made from the pass, so a scrape never reads the node and never
mixes two passes; it sends the bytes rendered for the pass, or renders them on arrival
when nobody expected it (reading ``/proc/self`` for ``process_*``;
``exporter.exposition.published``).
"""

from __future__ import annotations

import html
import json
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from . import __version__
from .cgroupfs.mode import NodeLayout
from .exposition.published import Exposition
from .web.config import WebConfigSource
from .web.listen import bind, describe, parse_listen_address
from .web.transport import HTTPServer, Limits, Stats

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
METRICS_PATH = "/metrics"
# Paths the app answers itself: --web.telemetry-path may not take one of them.
OWN_PATHS = ("/", "/healthz", "/findings", "/selftest")
DEMO_HINT = (
    "To see a finding happen on purpose, run a contention lab from a source checkout: "
    "contention-exporter demo --list (docs/labs.md)."
)


def check_metrics_path(path: str) -> str:
    """``path`` if /metrics can be served there (ValueError: why not)."""
    if not path.startswith("/") or path in OWN_PATHS or any(c in path for c in "?# "):
        raise ValueError(
            f"telemetry path {path!r}: must start with / and not be one of "
            f"{', '.join(OWN_PATHS)} (no query, fragment or space)"
        )
    return path


class SelftestEndpoint(Protocol):
    """``POST /selftest`` and ``GET /selftest`` (``exporter.selftest.service``)."""

    def start(self, seconds: float = ...) -> tuple[int, dict[str, Any]]: ...

    def state(self) -> dict[str, Any]: ...


_REASONS = {200: "200 OK", 202: "202 Accepted", 400: "400 Bad Request", 409: "409 Conflict"}


class App:
    def __init__(
        self,
        exposition: Exposition,
        facts: NodeLayout,
        interval: float,
        status: Callable[[], dict[str, str]] | None = None,
        metrics_path: str = METRICS_PATH,
        selftest: SelftestEndpoint | None = None,
    ) -> None:
        self.exposition = exposition
        self.facts = facts
        self.interval = interval
        self.status = status or (lambda: {})
        self.metrics_path = check_metrics_path(metrics_path)
        self.selftest = selftest

    def answers_now(self, environ: dict[str, Any]) -> bool:
        """True when the answer costs no rendering (every path but a /metrics format
        not yet rendered for this pass): the server then answers on its I/O thread,
        without handing the request to a worker thread."""
        if environ.get("PATH_INFO") != self.metrics_path:
            return True
        return self.exposition.ready(
            environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING")
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/selftest":
            return self._selftest(environ, method, start_response)
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        if path == self.metrics_path:
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

    def _selftest(
        self, environ: dict[str, Any], method: str, start_response: StartResponse
    ) -> list[bytes]:
        """POST starts the self-test (``?timeout=SECONDS``), GET says how it goes."""
        if self.selftest is None:
            doc: dict[str, Any] = {
                "error": "the self-test is off in this exporter (run --selftest.enabled; "
                "the chart's selftest.enabled)",
                "exit_code": 7,
            }
            status = 404
        elif method == "POST":
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            try:
                seconds = float(query.get("timeout", ["240"])[0])
            except ValueError:
                seconds = -1.0
            status, doc = self.selftest.start(seconds)
        elif method in ("GET", "HEAD"):
            status, doc = 200, self.selftest.state()
        else:
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD, POST")])
            return [b""]
        body = (json.dumps(doc) + "\n").encode()
        reason = _REASONS.get(status, "404 Not Found")
        return self._send(start_response, reason, "application/json", body)

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
        pub = self.exposition.current()
        result = pub.result
        if result is None:
            why = f"first pass failed: {pub.failure}" if pub.failure else "first pass pending"
            return self._send(
                start_response, "503 Service Unavailable", "text/plain", f"{why}\n".encode()
            )
        age = time.time() - result.at
        if age > max(3 * self.interval, 30):
            msg = f"stale: last sampler pass {age:.0f}s ago\n".encode()
            return self._send(start_response, "503 Service Unavailable", "text/plain", msg)
        # Alive and sampling: 200 (a restart would not help). What went wrong in the
        # pass is said, not hidden (contention_collector_success has the detail).
        problems = pub.problems()
        body = "ok\n" if not problems else "ok, degraded: " + "; ".join(problems) + "\n"
        return self._send(start_response, "200 OK", "text/plain", body.encode())

    def _findings(self, start_response: StartResponse) -> list[bytes]:
        pub = self.exposition.current()
        status = "200 OK" if pub.result is not None else "503 Service Unavailable"
        return self._send(start_response, status, "application/json", pub.findings_json)

    def _landing(self, start_response: StartResponse) -> list[bytes]:
        pub = self.exposition.current()
        result = pub.result
        facts = self.facts
        tracked = len(result.snapshot.containers) if result else None
        findings = len(result.findings) if result else None
        pending = f"first pass failed: {pub.failure}" if pub.failure else "first pass pending"
        rows = [
            ("cgroup mode", facts.mode.value),
            ("compute supported", "yes" if facts.supported else f"no: {facts.reason}"),
            ("PSI", "yes" if facts.psi else f"no: {facts.psi_reason}"),
            ("kernel BTF", "yes" if facts.btf else "no"),
            ("tracked cgroups", pending if tracked is None else str(tracked)),
            ("findings", pending if findings is None else str(findings)),
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
        metrics = html.escape(self.metrics_path, quote=True)
        page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>contention-exporter</title></head>
<body><h1>contention-exporter {html.escape(__version__)}</h1>
<p>Is a container starved of CPU or memory, and by whom?</p>
<ul><li><a href="{metrics}">{metrics}</a> (Prometheus)</li>
<li><a href="/findings">/findings</a> (JSON)</li>
<li><a href="/healthz">/healthz</a></li></ul>
<table>{table}</table>{hint}</body></html>
"""
        return self._send(start_response, "200 OK", "text/html; charset=utf-8", page.encode())


class Server:
    """The app on every ``--web.listen-address``, with the web configuration (TLS,
    basic auth) and the limits of ``exporter.web.transport``. Binds at construction
    (raises ValueError for a malformed address, OSError e.g. when it is taken), serves
    from :meth:`start`."""

    def __init__(
        self,
        app: App,
        addresses: str | Sequence[str],
        web_config: WebConfigSource | None = None,
        limits: Limits | None = None,
    ) -> None:
        limits = limits or Limits()
        parsed = [parse_listen_address(a) for a in _as_list(addresses)]
        self.sockets: list[socket.socket] = []
        try:
            for a in parsed:
                self.sockets.extend(bind(a, limits.backlog))
        except BaseException:
            for s in self.sockets:
                s.close()
            raise
        self.web_config = web_config
        self.http = HTTPServer(app, self.sockets, limits, web_config)

    @property
    def port(self) -> int:
        """The port of the first address (the one to use after binding port 0)."""
        return int(self.sockets[0].getsockname()[1])

    @property
    def addresses(self) -> list[str]:
        return [describe(s) for s in self.sockets]

    def start(self) -> None:
        self.http.start()

    def stop(self) -> None:
        self.http.stop()

    @property
    def stats(self) -> Stats:
        """The HTTP front's counters (the ``http`` collector reads them)."""
        return self.http.stats


def _as_list(addresses: str | Sequence[str]) -> list[str]:
    return [addresses] if isinstance(addresses, str) else list(addresses)
