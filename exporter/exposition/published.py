"""One pass, as every scrape and ``/findings`` request sees it, and its rendered bytes.

At the end of each pass the agent hands over a :class:`PassResult` (the sampler's
snapshot and the findings evaluated from that same pass). :meth:`Exposition.publish`
builds every family from it once (the collectors of ``exposition.registry``, with the
live ``Sources``: the process, the pod watch, the config files, the HTTP front), wraps
them with the ``/findings`` document in one immutable :class:`Published`, and swaps it
in with a single reference assignment. A
request takes that reference once and serves from it, so a scrape never mixes two
passes and never reads the node (a render reads ``/proc/self`` for ``process_*``).

Building the families and rendering them as text (and gzip) is the costly part of a
scrape at 1,000 containers. It happens at most once per pass and format, never per
scrape, and each render reuses what the last one wrote for series whose values did
not move (one ``text.Renderer`` and one ``deflate.Gzipper`` per exposition, shared by
its passes):

* ``render="pass"`` (the default): at the end of the pass, in the sampler thread, for
  each format a scrape is expected to ask for before the next pass lands (scrapers
  are regular: the next request is expected one median gap after the last). A scrape
  then only sends bytes, and a pass nobody will scrape costs no render. A request
  nobody expected renders on arrival, like ``scrape``.
* ``render="scrape"``: on the first request for a format after each pass (later
  requests of that pass, e.g. a second Prometheus, reuse the bytes).

Why the default (bench/README.md, 1,000 containers, a pass every 5 s, a scrape every
15 s): rendering on the first scrape costs one render per scrape but makes that scrape
wait for it; rendering with every pass costs a render every 5 s, three times what
the scrapes need; rendering with the pass before the expected scrape costs one render
per scrape, like ``scrape``, and the scrape only sends bytes (~0.1 ms).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import Metric

from .deflate import Gzipper
from .inputs import PassResult, Sources
from .node import build_info
from .registry import PassFamilies
from .status import not_ready
from .text import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Renderer

RENDER_MODES = ("pass", "scrape")
# A format nobody asked for in this long is no longer rendered ahead of requests.
KEEP_RENDERING_S = 600.0
# Jitter allowed around an expected request, as a share of the interval.
PREDICTION_SLACK = 0.2
# gzip level 1: ~half the CPU of level 6 for ~10 % more bytes (bench/README.md).
GZIP_LEVEL = 1

Variant = tuple[bool, bool]  # (openmetrics, gzip)


@dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    content_type: str
    gzipped: bool


class Published:
    """One pass as served. Its data never changes; each format is rendered at most
    once (the first call that needs it, under a lock). Its families are built when
    first needed and released after each render (:class:`~.registry.PassFamilies`):
    a format asked for later in the pass builds the ``of_pass`` ones again (the same
    families), and the pass no longer holds two copies of the exposition while the
    next one is sampled and rendered."""

    def __init__(
        self,
        result: PassResult | None,
        findings_json: bytes,
        sources: Sources | None = None,
        *,
        failure: str = "",
        failed_passes: int = 0,
        renderer: Renderer | None = None,
        gzipper: Gzipper | None = None,
    ) -> None:
        self.result = result  # None: before the first pass (a "not ready" exposition)
        self.findings_json = findings_json
        # Before the first pass: why the passes so far failed ("": none failed yet).
        self.failure = failure
        self.failed_passes = failed_passes
        self._sources = sources if sources is not None else Sources()
        self._families: PassFamilies | list[Metric] | None = None
        self._renders: dict[Variant, Rendered] = {}
        # Shared by the passes of one exposition: each render keeps what the next
        # one can reuse (text.Renderer, deflate.Gzipper).
        self._renderer = renderer if renderer is not None else Renderer()
        self._gzipper = gzipper if gzipper is not None else Gzipper(GZIP_LEVEL)
        self._lock = threading.Lock()

    @property
    def rendered(self) -> frozenset[Variant]:
        return frozenset(self._renders)

    def problems(self) -> list[str]:
        """What went wrong in this pass, one phrase each (``/healthz`` says them): the
        parts that failed, and the cgroups it could not sample other than vanished."""
        if self.result is None:
            return []
        snap = self.result.snapshot
        out = [
            f"{name} failed"
            for name, st in sorted({**snap.collectors, "findings": self.result.evaluation}.items())
            if not st.success
        ]
        lost: dict[str, int] = {}
        for x in snap.lost:
            if x.reason != "vanished":
                lost[x.reason] = lost.get(x.reason, 0) + 1
        if lost:
            out.append(
                "cgroups not sampled: " + ", ".join(f"{n} {r}" for r, n in sorted(lost.items()))
            )
        return out

    def families(self) -> list[Metric]:
        with self._lock:
            return self._families_locked()

    def _families_locked(self) -> list[Metric]:
        fams = self._families
        if fams is None:
            if self.result is None:
                fams = [*build_info(), *not_ready(self.failed_passes)]
            else:
                fams = PassFamilies(self.result, self._sources)
            self._families = fams
        return fams.families() if isinstance(fams, PassFamilies) else fams

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
                self._release()
        return hit

    def prerender(self, variants: Iterable[Variant]) -> None:
        """Render ``variants`` now (those not rendered yet), then release the families."""
        with self._lock:
            for openmetrics, gzipped in variants:
                if (openmetrics, gzipped) not in self._renders:
                    rendered = self._render(openmetrics, gzipped)
                    self._renders[(openmetrics, gzipped)] = rendered
            self._release()

    def _release(self) -> None:
        if isinstance(self._families, PassFamilies):
            self._families.release()

    def _render(self, openmetrics: bool, gzipped: bool) -> Rendered:
        ctype = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
        parts = self._renderer.parts(self._families_locked(), openmetrics)
        if gzipped:  # the plain body is not kept unless a client asks for it
            return Rendered(self._gzipper.gzip(parts), ctype, True)
        return Rendered(b"".join(b"".join(p) for p in parts), ctype, False)


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


class _Requests:
    """When one format was asked for: enough to expect the next request."""

    def __init__(self) -> None:
        self.times: deque[float] = deque(maxlen=6)

    def interval(self) -> float | None:
        """The median gap between the recent requests (None: fewer than two)."""
        t = list(self.times)
        gaps = sorted(b - a for a, b in itertools.pairwise(t) if b > a)
        return gaps[len(gaps) // 2] if gaps else None

    def due_before(self, deadline: float, now: float) -> bool:
        """Is a request expected by ``deadline``? Unknown interval: assume so."""
        if not self.times or now - self.times[-1] > KEEP_RENDERING_S:
            return False
        every = self.interval()
        if every is None:
            return True
        due = self.times[-1] + every
        while due < now - every * PREDICTION_SLACK:  # missed or late: the next one
            due += every
        return due <= deadline


class Exposition:
    """The published pass, swapped atomically, and when scrapes ask for each format."""

    def __init__(
        self,
        render_mode: str = "pass",
        sources: Sources | None = None,
        pass_interval: float = 5.0,
        *,
        predict: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if render_mode not in RENDER_MODES:
            raise ValueError(f"render mode must be one of {RENDER_MODES}, not {render_mode!r}")
        self.render_mode = render_mode
        # Read by every pass's collectors when its families are built (attach the
        # HTTP front here once the server is up).
        self.sources = sources if sources is not None else Sources()
        self.pass_interval = pass_interval
        self.predict = predict  # False: render every pass (the benchmark's comparison)
        self.clock = clock
        self._requests: dict[Variant, _Requests] = {}
        self._renderer = Renderer()
        self._gzipper = Gzipper(GZIP_LEVEL)
        self._current = Published(None, _NOT_READY_JSON)

    def current(self) -> Published:
        return self._current

    def fail(self, reason: str, failed_passes: int) -> None:
        """A pass failed as a whole. Before the first published pass, that is what
        ``/healthz``, ``/findings`` and the ``contention_sampler_*`` families say
        (instead of "pending"); after it, the last pass stays published and ages."""
        if self._current.result is not None:
            return
        doc = {"error": f"first sampler pass failed: {reason}"}
        self._current = Published(
            None, json.dumps(doc).encode(), failure=reason, failed_passes=failed_passes
        )

    def publish(self, result: PassResult, now: float | None = None) -> Published:
        """Publish one pass. With ``render="pass"``, render now each format a scrape is
        expected to ask for before the next pass lands; the rest renders on demand."""
        doc = result.findings_document()
        pub = Published(
            result,
            json.dumps(doc).encode(),
            self.sources,
            renderer=self._renderer,
            gzipper=self._gzipper,
        )
        if self.render_mode == "pass":
            pub.prerender(self.due(self.clock() if now is None else now))
        self._current = pub  # one reference: a request sees this pass or the last
        return pub

    def due(self, now: float) -> list[Variant]:
        """Formats to render with a pass published at ``now`` (monotonic)."""
        deadline = now + self.pass_interval * (1 + PREDICTION_SLACK)
        return [
            v
            for v, r in list(self._requests.items())
            if (not self.predict and r.times and now - r.times[-1] <= KEEP_RENDERING_S)
            or (self.predict and r.due_before(deadline, now))
        ]

    def ready(self, accept: str | None, accept_encoding: str | None) -> bool:
        """Is this client's format rendered for the current pass already (so that
        :meth:`serve` only hands over bytes)?"""
        variant = (wants_openmetrics(accept), accepts_gzip(accept_encoding))
        return variant in self._current.rendered

    def serve(
        self, accept: str | None, accept_encoding: str | None, now: float | None = None
    ) -> Rendered:
        """The current pass's exposition as this client wants it."""
        variant = (wants_openmetrics(accept), accepts_gzip(accept_encoding))
        requests = self._requests.get(variant)
        if requests is None:
            requests = self._requests.setdefault(variant, _Requests())
        requests.times.append(self.clock() if now is None else now)
        return self._current.metrics(*variant)


_NOT_READY_JSON = json.dumps({"error": "first sampler pass pending"}).encode()
