"""The agent: the sampler, identity, scheduler probe and findings wired once.

Once per pass, in the sampler's own loop: sample, evaluate the findings on the window
of that same pass, and publish both together (``exporter.exposition.published``). The
long-running exporter (``run``) runs the loop in a thread; ``diagnose`` runs the same
loop in the foreground for a while and reads the last published pass before it closes
anything, so both report exactly what one pass saw.

Takes typed settings (:class:`AgentConfig`); the commands build them from arguments.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .cgroupfs import mode
from .cgroupfs.mode import NodeLayout
from .config_file import ConfigFileStatus, WatchedFile
from .exposition.inputs import PassResult, Sources
from .exposition.process import own_process
from .exposition.published import Exposition, Published
from .findings.aggregates import exported_blame
from .findings.evaluate import evaluate
from .findings.thresholds import Thresholds, watch_thresholds
from .identity import HostIdentityResolver, IdentityResolver
from .kube import KubeConfig, build_resolver
from .kube.resolver import KubeIdentityResolver
from .metadata_file import FileIdentityResolver
from .probe.config import ProbeConfig, open_probe
from .probe.fold import Probe
from .sampler.loop import Sampler
from .sampler.snapshot import CollectorStatus, Snapshot
from .window.model import Window

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    sysfs: str = "/sys"
    procfs: str = "/proc"
    sample_interval: float = 5.0
    metadata_file: str | None = None  # host-mode requests and names (docs/host-mode.md)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    kube: KubeConfig = field(default_factory=KubeConfig)
    render: str = "pass"  # when /metrics is rendered: "pass" or "scrape" (exposition)
    process_metrics: bool = True  # the exporter's own CPU, memory and GC families
    # the optional collectors asked for (catalog.OPTIONAL_COLLECTORS)
    collectors: frozenset[str] = frozenset()
    # The --config.file file the thresholds came from: re-read when it changes (None: the
    # packaged defaults, nothing to watch).
    thresholds_file: str | None = None


def build_identity(
    config: AgentConfig,
) -> tuple[IdentityResolver, KubeIdentityResolver | None]:
    """Host mode names cgroups by path; Kubernetes mode after pods; a metadata file
    overlays requests and names on either. Raises ValueError for usage errors."""
    kres = build_resolver(config.kube)
    resolver: IdentityResolver = kres if kres is not None else HostIdentityResolver()
    if config.metadata_file:
        try:
            resolver = FileIdentityResolver(config.metadata_file, inner=resolver)
        except ValueError:
            if kres is not None:
                kres.stop()
            raise
    return resolver, kres


class Agent:
    def __init__(
        self, config: AgentConfig, thresholds: Thresholds, *, probe: Probe | None = None
    ) -> None:
        """Build everything the config asks for; the probe is loaded here (about a
        second). ``probe``: one already open (unit tests hand a stand-in for BPF).
        Raises ValueError for usage errors (the command says it, exits 2)."""
        self.config = config
        self.thresholds = thresholds
        self._thresholds_file: WatchedFile[Thresholds] | None = None
        if config.thresholds_file is not None:
            self._thresholds_file = watch_thresholds(config.thresholds_file)
            self.thresholds = self._thresholds_file.value
        self.facts: NodeLayout = mode.detect(config.sysfs, config.procfs)
        resolver, self.kube = build_identity(config)
        self._config_files: list[Callable[[], ConfigFileStatus]] = []
        if self._thresholds_file is not None:
            self._config_files.append(self._thresholds_file.status)
        if isinstance(resolver, FileIdentityResolver):
            self._config_files.append(resolver.status)
        self.probe: Probe | None = probe
        if probe is None and (self.facts.supported or not config.probe.enabled):
            self.probe = open_probe(config.probe, config.procfs)
        self.sampler = Sampler(
            self.facts,
            procfs=config.procfs,
            resolver=resolver,
            interval=config.sample_interval,
            window_minutes=thresholds.window_minutes,
            probe=self.probe,
        )
        sources = Sources(
            process=own_process() if config.process_metrics else None,
            kube=self.kube,
            config_files=self._config_files,
        )
        self.exposition = Exposition(config.render, sources, config.sample_interval)
        # Called with each pass and its window, in the sampler's thread, after the pass
        # is published (the self-test: exporter.selftest.service).
        self.pass_observers: list[Callable[[Snapshot, Window | None], None]] = []
        self._closed = False

    # -- one pass ---------------------------------------------------------------------

    def run_pass(self, now: float | None = None) -> Published:
        """Sample once, evaluate and publish (tests)."""
        return self.publish(self.sampler.run_once(now))

    def first_pass(self) -> Published:
        """The pass at start, so the first scrape has data. A failure is logged and
        published as such ("first pass failed", not "pending"); the loop retries."""
        snap = self.sampler.try_pass()
        if snap is None:
            self._failed(self.sampler.last_failure)
            return self.exposition.current()
        try:
            return self.publish(snap)
        except Exception as e:  # the loop publishes the next pass
            log.error("publishing the first pass failed: %s", e)
            self._failed(f"publishing it failed: {e}")
            return self.exposition.current()

    def _failed(self, reason: str) -> None:
        self.exposition.fail(reason, self.sampler.failed_passes)

    def publish(self, snap: Snapshot) -> Published:
        """Evaluate the findings of the pass ``snap`` came from and publish the two
        together. Called in the sampler's loop, right after the pass."""
        result = self.evaluate(snap)
        published = self.exposition.publish(result)
        for observe in list(self.pass_observers):
            try:
                observe(snap, result.window)
            except Exception as e:  # an observer's bug must not cost the pass
                log.error("pass observer failed: %s", e, exc_info=True)
        return published

    def evaluate(self, snap: Snapshot) -> PassResult:
        self._reload_thresholds()
        th, now = self.thresholds, snap.taken_at
        t0 = time.perf_counter()
        window: Window | None
        try:
            window = self.sampler.window()
            findings = tuple(evaluate(window, th, now, self.config.probe.top_k))
            victims = (c.cgroup_id for c in snap.containers)
            blame = (  # the probe's, for the exposition
                exported_blame(window, self.sampler.blame_in_progress(), victims, now, th)
                if snap.probe is not None
                else {}
            )
            ok = True
        except Exception as e:  # a bug must cost the findings, not the pass
            log.error("findings evaluation failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
            window, findings, blame, ok = None, (), {}, False
        return PassResult(
            snapshot=snap,
            window=window,
            findings=findings,
            blame=blame,
            evaluation=CollectorStatus(ok, time.perf_counter() - t0),
            window_minutes=th.window_minutes,
            top_k=self.config.probe.top_k,
            collectors=self.config.collectors,
            antagonist_top_k=self.config.probe.antagonist_top_k,
        )

    def _reload_thresholds(self) -> None:
        """Take an edited thresholds file, if it is good (a bad one is logged once and
        counted; the last good thresholds stay)."""
        f = self._thresholds_file
        if f is None or not f.poll():
            return
        new = f.value
        if new.window_minutes != self.thresholds.window_minutes:
            self.sampler.set_window_minutes(new.window_minutes)
        self.thresholds = new

    # -- the loop ---------------------------------------------------------------------

    def start(self) -> None:
        """The exporter: the sampler's loop in a background thread."""
        self.sampler.start(self.publish, on_failure=self._failed)

    def run_for(self, seconds: float, progress: Callable[[int, float], None] | None = None) -> int:
        """``diagnose``: the same loop in this thread for ``seconds``; returns passes."""
        end = time.monotonic() + seconds
        count = 0

        def on_pass(snap: Snapshot) -> None:
            nonlocal count
            self.publish(snap)
            count += 1
            if progress is not None:
                progress(count, max(0.0, end - time.monotonic()))

        self.sampler.run(on_pass, until=end, stop=threading.Event(), on_failure=self._failed)
        return count

    def published(self) -> Published:
        """The last published pass (a "not ready" one before the first)."""
        return self.exposition.current()

    def status(self) -> dict[str, str]:
        """Facts for the landing page and logs."""
        out = {}
        if self.probe is not None:
            st = self.probe.status
            out["scheduler probe"] = (
                f"loaded by {st.loader} ({st.attribution})"
                if st.loaded
                else f"off: {st.reason}: {st.detail}"
            )
        out["identity"] = "kubernetes" if self.kube is not None else "host (cgroup paths)"
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.sampler.stop()
        if self.probe is not None:
            self.probe.close()
        if self.kube is not None:
            self.kube.stop()
