"""What the collectors read: one pass (:class:`PassResult`), the live sources beside it
(:class:`Sources`: the process, the pod watch, the configuration files, the HTTP
front), and, for one build of a pass's families, both together (:class:`Context`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import Metric

from ..config_file import ConfigFileStatus
from ..findings.model import Finding
from ..identity import Names
from ..kube.resolver import KubeIdentityResolver
from ..probe.blame import DEFAULT_ANTAGONIST_TOP_K, DEFAULT_TOP_K
from ..sampler.snapshot import CollectorStatus, Snapshot
from ..window.model import CulpritKey, Window


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass: the sampler's snapshot and what was evaluated from it."""

    snapshot: Snapshot
    window: Window | None  # the window the findings were evaluated on (None: not yet)
    findings: tuple[Finding, ...]
    # victim cgroup id -> wait seconds per culprit over the exported blame window
    # (findings.aggregates.exported_blame)
    blame: Mapping[int, Mapping[CulpritKey, float]]
    evaluation: CollectorStatus  # the findings evaluation of this pass
    window_minutes: int
    top_k: int = DEFAULT_TOP_K
    collectors: frozenset[str] = frozenset()  # optional ones asked for (catalog)
    antagonist_top_k: int = DEFAULT_ANTAGONIST_TOP_K

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


class HttpStats(Protocol):
    """The HTTP front's counters (``exporter.web.transport.Stats``)."""

    @property
    def closed(self) -> dict[str, int]: ...
    @property
    def responses(self) -> Counter[int]: ...
    @property
    def open(self) -> int: ...


class WebConfigState(Protocol):
    """``--web.config.file`` (``exporter.web.config.WebConfigSource``)."""

    def status(self) -> ConfigFileStatus: ...  # its reload state, kind "web"


class HttpFront(Protocol):
    """What the ``http`` collector reads of the server (``exporter.server.Server``)."""

    @property
    def stats(self) -> HttpStats: ...
    @property
    def web_config(self) -> WebConfigState | None: ...


@dataclass(slots=True)
class Sources:
    """What collectors read beside the pass, when its families are built. Set once at
    start (the HTTP front when the server is up); None: not there, no families."""

    process: Callable[[], Iterable[Metric]] | None = None  # process_*, python_gc_*
    kube: KubeIdentityResolver | None = None
    config_files: Sequence[Callable[[], ConfigFileStatus]] = ()
    http: HttpFront | None = None
    # the last self-test's result (``POST /selftest``), None before the first
    selftest: Callable[[], dict[str, Any] | None] | None = None

    def attach_http(self, front: HttpFront) -> None:
        """The HTTP front, once it is up: its counters (``http``) and, with
        ``--web.config.file``, that file's reload state (``config``, kind "web")."""
        self.http = front
        if front.web_config is not None:
            self.config_files = (*self.config_files, front.web_config.status)


@dataclass(frozen=True, slots=True)
class Context:
    """One build of a pass's families: what every collector of it reads."""

    result: PassResult
    sources: Sources
    enabled: frozenset[str]  # the collectors that run (catalog.enabled)
    # Names two tracked cgroups share in this pass: both keep their path label.
    ambiguous: frozenset[Names]
    started: float  # time.perf_counter() when the build started
    failed: list[str] = field(default_factory=list)  # collectors that raised so far

    @property
    def snapshot(self) -> Snapshot:
        return self.result.snapshot
