"""One pass, as every scrape and ``/findings`` request sees it, and its rendered bytes.

At the end of each pass the agent hands over a :class:`PassResult` (the sampler's
snapshot and the findings evaluated from that same pass). :meth:`Exposition.publish`
builds every family from it once, wraps them with the ``/findings`` document in one
immutable :class:`Published`, and swaps it in with a single reference assignment. A
request takes that reference once and serves from it, so a scrape never mixes two
passes and never touches the filesystem.

Rendering the families as text (and gzip) is the costly part of a scrape at 1,000
containers. It happens once per pass and format, never per scrape:

* ``render="pass"`` (the default): at the end of the pass, in the sampler thread, for
  each format a scrape asked for in the last :data:`KEEP_RENDERING_S` seconds; a scrape
  only copies bytes. A format nobody asked for is rendered on its first request.
* ``render="scrape"``: on the first request for a format after each pass (later
  requests, e.g. a second Prometheus, reuse the bytes).

bench/README.md has the measurements behind the default.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import Metric

from ..findings.aggregates import identities
from ..findings.model import Finding
from ..probe.blame import DEFAULT_TOP_K
from ..sampler.snapshot import CollectorStatus, Snapshot
from ..window.model import CulpritKey, Window
from .containers import container_families
from .findings import finding_families
from .node import build_info, node_families
from .probe import VictimProbeData, build_probe_families
from .status import not_ready, status_families
from .text import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, render

log = logging.getLogger(__name__)

RENDER_MODES = ("pass", "scrape")
# A format asked for within this long is rendered with every pass (render="pass").
KEEP_RENDERING_S = 600.0
# gzip level 1: ~half the CPU of level 6 for ~10 % more bytes (bench/README.md).
GZIP_LEVEL = 1

Variant = tuple[bool, bool]  # (openmetrics, gzip)
ExtraFamilies = Callable[[], Iterable[Metric]]  # built with each pass (process, kube)


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass: the sampler's snapshot and what was evaluated from it."""

    snapshot: Snapshot
    window: Window | None  # the window the findings were evaluated on (None: not yet)
    findings: tuple[Finding, ...]
    # victim cgroup id -> wait seconds per culprit over the exported blame window
    blame: Mapping[int, Mapping[CulpritKey, float]]
    evaluation: CollectorStatus  # the findings evaluation of this pass
    window_minutes: int
    top_k: int = DEFAULT_TOP_K

    @property
    def at(self) -> float:
        return self.snapshot.taken_at

    @property
    def probe_loaded(self) -> bool | None:
        """Whether the scheduler probe was loaded in this pass (None: none configured)."""
        p = self.snapshot.probe
        return None if p is None else p.status.loaded

    def findings_document(self) -> dict[str, Any]:
        from ..findings.model import findings_document

        return findings_document(
            list(self.findings),
            self.at,
            self.window,
            self.window_minutes,
            probe_loaded=bool(self.probe_loaded),
        )


def pass_families(result: PassResult, extra: Sequence[ExtraFamilies] = ()) -> list[Metric]:
    """Every family of one pass, in exposition order. A part that fails loses its own
    families and says so in ``contention_collector_success{collector="exposition"}``."""
    t0 = time.perf_counter()
    snap = result.snapshot
    out: list[Metric] = [build_info()]
    ok = True
    parts: list[Callable[[], Iterable[Metric]]] = [
        lambda: node_families(snap),
        lambda: container_families(snap),
        lambda: _probe_families(result),
        lambda: finding_families(result.findings, result.at),
        *extra,
    ]
    for part in parts:
        try:
            out.extend(part())
        except Exception as e:  # one broken part must not cost the others
            ok = False
            log.error("building metric families failed: %s", e)
    collectors = dict(snap.collectors)
    collectors["findings"] = result.evaluation
    collectors["exposition"] = CollectorStatus(ok, time.perf_counter() - t0)
    out.extend(status_families(snap, collectors))
    return out


def _probe_families(result: PassResult) -> list[Metric]:
    snap, probe = result.snapshot, result.snapshot.probe
    if probe is None:
        return []
    victims = [
        VictimProbeData(
            identity=c.identity,
            runq=probe.runq.get(c.cgroup_id),
            blame_window_s=result.blame.get(c.cgroup_id, {}),
        )
        for c in snap.containers
    ]
    names = identities(result.window) if result.window is not None else {}
    return build_probe_families(victims, names, probe.status, probe.totals, top_k=result.top_k)


@dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    content_type: str
    gzipped: bool


@dataclass
class Published:
    """One pass as served. Its data never changes; its renderings are made once."""

    result: PassResult | None  # None: before the first pass (a "not ready" exposition)
    families: list[Metric]
    findings_json: bytes
    published_at: float = field(default_factory=time.monotonic)
    _renders: dict[Variant, Rendered] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def metrics(self, openmetrics: bool, gzipped: bool) -> Rendered:
        """The exposition in one format, rendered on the first call for it."""
        variant = (openmetrics, gzipped)
        hit = self._renders.get(variant)
        if hit is not None:
            return hit
        with self._lock:  # concurrent first requests render once
            hit = self._renders.get(variant)
            if hit is None:
                hit = self._renders[variant] = self._render(openmetrics, gzipped)
        return hit

    def _render(self, openmetrics: bool, gzipped: bool) -> Rendered:
        ctype = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
        plain = self._renders.get((openmetrics, False))
        body = plain.body if plain is not None else render(self.families, openmetrics)
        if not gzipped:
            return Rendered(body, ctype, False)
        if plain is None:  # keep the plain bytes too: a client without gzip may come
            self._renders[(openmetrics, False)] = Rendered(body, ctype, False)
        return Rendered(gzip.compress(body, GZIP_LEVEL, mtime=0), ctype, True)


def wants_openmetrics(accept: str | None) -> bool:
    """Content negotiation as Prometheus does it: OpenMetrics 1.0.0 when the client
    lists ``application/openmetrics-text`` (no version, or 0.0.1 / 1.0.0), else text
    0.0.4 (what prometheus_client's own server answers)."""
    for part in (accept or "").split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if media != "application/openmetrics-text":
            continue
        version = next((p[8:] for p in params if p.startswith("version=")), "")
        if version in ("", "0.0.1", "1.0.0"):
            return True
    return False


def accepts_gzip(accept_encoding: str | None) -> bool:
    return any(
        p.split(";")[0].strip().lower() == "gzip" for p in (accept_encoding or "").split(",")
    )


class Exposition:
    """The published pass, swapped atomically, and which formats scrapes ask for."""

    def __init__(self, render_mode: str = "pass", extra: Sequence[ExtraFamilies] = ()) -> None:
        if render_mode not in RENDER_MODES:
            raise ValueError(f"render mode must be one of {RENDER_MODES}, not {render_mode!r}")
        self.render_mode = render_mode
        self.extra = list(extra)
        self._asked: dict[Variant, float] = {}  # variant -> monotonic time last asked
        self._current = Published(None, [build_info(), not_ready()], _NOT_READY_JSON)

    def current(self) -> Published:
        return self._current

    def publish(self, result: PassResult) -> Published:
        doc = result.findings_document()
        pub = Published(result, pass_families(result, self.extra), json.dumps(doc).encode())
        if self.render_mode == "pass":
            now = time.monotonic()
            for variant, at in list(self._asked.items()):
                if now - at <= KEEP_RENDERING_S:
                    pub.metrics(*variant)
        self._current = pub  # one reference: a request sees this pass or the last
        return pub

    def serve(self, accept: str | None, accept_encoding: str | None) -> Rendered:
        """The current pass's exposition as this client wants it."""
        variant = (wants_openmetrics(accept), accepts_gzip(accept_encoding))
        self._asked[variant] = time.monotonic()
        return self._current.metrics(*variant)


_NOT_READY_JSON = json.dumps({"error": "first sampler pass pending"}).encode()
