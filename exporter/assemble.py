"""Putting the parts together from command-line flags (``run`` and ``diagnose``).

One place decides how the sampler, identity, scheduler probe and findings are wired,
so the long-running exporter and the one-shot ``diagnose`` see the same thing.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from . import kube
from .cgroupfs import mode
from .cgroupfs.mode import NodeFacts
from .findings import Finding, Thresholds, evaluate, finding_families, findings_document
from .findings.evaluator import Clock, identities, window_blame
from .identity import HostIdentityResolver, IdentityResolver
from .metadata_file import FileIdentityResolver
from .sampler import ProbeSnapshot, Sampler, Snapshot
from .window import CulpritKey, Window

if TYPE_CHECKING:
    from .kube.resolver import KubeIdentityResolver
    from .probe import SchedProbe

log = logging.getLogger(__name__)

DEFAULT_KERNEL_SOURCE = "/var/cache/contention-exporter/kernel-source"  # scripts/setup-probe.sh


def add_probe_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scheduler probe (blame)")
    g.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="do not load the eBPF scheduler probe: usage and stall layers only, no culprits",
    )
    g.add_argument(
        "--probe.attribution",
        dest="probe_attribution",
        choices=["occupancy", "last-runner"],
        default="occupancy",
        help="how a wait is split among culprits: over the run slices it overlapped "
        "(occupancy), or all on whoever ran last before the victim (default: %(default)s)",
    )
    g.add_argument(
        "--probe.min-wait-us",
        dest="probe_min_wait_us",
        type=float,
        default=50.0,
        metavar="US",
        help="waits shorter than this stay out of the blame matrix (still in the "
        "histogram) (default: %(default)s)",
    )
    g.add_argument(
        "--probe.kernel-source",
        dest="probe_kernel_source",
        default=None,
        metavar="DIR",
        help="kernel headers for BCC (default: $BCC_KERNEL_SOURCE, /lib/modules/$(uname "
        f"-r)/build, then {DEFAULT_KERNEL_SOURCE})",
    )
    g.add_argument(
        "--probe.top-k",
        dest="probe_top_k",
        type=int,
        default=3,
        metavar="K",
        help="culprits exported per victim in contention_blame_share (default: %(default)s)",
    )


def _kernel_source(args: argparse.Namespace) -> str | None:
    import os

    if args.probe_kernel_source:
        return str(args.probe_kernel_source)
    if os.environ.get("BCC_KERNEL_SOURCE"):
        return None  # BCC reads it itself
    build = f"/lib/modules/{os.uname().release}/build"
    if os.path.isdir(build):
        return None
    if os.path.isdir(DEFAULT_KERNEL_SOURCE):
        return DEFAULT_KERNEL_SOURCE
    return None


def build_resolver(
    args: argparse.Namespace,
) -> tuple[IdentityResolver, KubeIdentityResolver | None]:
    """Host mode names cgroups by path; ``--kubernetes`` names them after pods; a
    metadata file overlays requests and names on either."""
    kres = kube.build_resolver(args) if getattr(args, "kubernetes", False) else None
    resolver: IdentityResolver = kres if kres is not None else HostIdentityResolver()
    if getattr(args, "metadata_file", None):
        resolver = FileIdentityResolver(args.metadata_file, inner=resolver)
    return resolver, kres


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What one pass's window says: evaluated once per pass, read by every scrape and
    every ``/findings`` request until the next pass."""

    at: float
    window: Window
    findings: list[Finding]
    blame: dict[int, dict[CulpritKey, float]]  # victim id -> wait seconds per culprit
    families: list[Metric]  # probe and finding families: built here, served by scrapes


@dataclass
class Assembly:
    facts: NodeFacts
    sampler: Sampler
    thresholds: Thresholds
    probe: SchedProbe | None
    kube: KubeIdentityResolver | None
    top_k: int = 3
    _verdicts: Verdicts | None = None

    def __post_init__(self) -> None:
        self.sampler.after_pass.append(self.evaluate)

    def evaluate(self, snap: Snapshot) -> Verdicts:
        """Findings, blame windows and their metric families for the pass ``snap`` came
        from (classifying every victim's culprits is per-pass work, not per-scrape)."""
        th, w, now = self.thresholds, self.sampler.window(), snap.taken_at
        blame: dict[int, dict[CulpritKey, float]] = {}
        families: list[Metric] = []
        if snap.probe is not None:
            # The gauge's window: the complete minutes plus the minute in progress
            # (the evaluator's own blame stays on complete minutes).
            partial = self.sampler.blame_in_progress()
            clock = Clock.at(now, th, w)
            for c in snap.containers:
                b = window_blame(w, c.cgroup_id, now, th, clock)
                for key, s in partial.get(c.cgroup_id, {}).items():
                    b[key] = b.get(key, 0.0) + s
                blame[c.cgroup_id] = b
            families += self._probe_families(snap, snap.probe, w, blame)
        findings = evaluate(w, th, now)
        families += finding_families(findings)
        v = self._verdicts = Verdicts(now, w, findings, blame, families)
        return v

    def _probe_families(
        self,
        snap: Snapshot,
        probe: ProbeSnapshot,
        w: Window,
        blame: dict[int, dict[CulpritKey, float]],
    ) -> list[Metric]:
        from .probe.metrics import VictimProbeData, build_probe_families

        victims = [
            VictimProbeData(
                identity=c.identity,
                runq=probe.runq.get(c.cgroup_id),
                blame_window_s=blame.get(c.cgroup_id, {}),
            )
            for c in snap.containers
        ]
        return build_probe_families(
            victims, identities(w), probe.status, probe.totals, top_k=self.top_k
        )

    def verdicts(self) -> Verdicts | None:
        if self._verdicts is None:
            snap = self.sampler.snapshot()
            return None if snap is None else self.evaluate(snap)
        return self._verdicts

    def findings_doc(self) -> dict[str, Any]:
        v = self.verdicts()
        if v is None:
            w = self.sampler.window()
            return findings_document([], time.time(), w, self.thresholds)
        return findings_document(v.findings, v.at, v.window, self.thresholds)

    def extra_families(self, snap: Snapshot) -> Iterable[Metric]:
        """Probe and finding families of the latest evaluated pass (built once in
        :meth:`evaluate`; a scrape only serialises them)."""
        v = self.verdicts()
        return [] if v is None else v.families

    def close(self) -> None:
        self.sampler.stop()
        if self.probe is not None:
            self.probe.close()
        if self.kube is not None:
            self.kube.stop()


def assemble(args: argparse.Namespace, thresholds: Thresholds) -> Assembly:
    """Build the sampler (and probe, identity) the flags ask for. Raises ValueError
    for usage errors (the caller prints it and exits 2)."""
    facts = mode.detect(args.sysfs, args.procfs)
    resolver, kres = build_resolver(args)
    probe = None
    if getattr(args, "probe", True) and facts.supported:
        from .probe import SchedProbe

        probe = SchedProbe(
            attribution=args.probe_attribution,
            min_wait_us=args.probe_min_wait_us,
            kernel_source=_kernel_source(args),
            procfs=args.procfs,
        )
        status = probe.load()
        if status.loaded:
            log.info("scheduler probe loaded (attribution=%s)", status.attribution)
        # not loaded: load() logged the reason; contention_probe_loaded{reason} says it too
    elif getattr(args, "probe", True) is False:
        from .probe import SchedProbe

        probe = SchedProbe(enabled=False)
        probe.load()  # records reason "disabled" for contention_probe_loaded
    sampler = Sampler(
        facts,
        procfs=args.procfs,
        resolver=resolver,
        interval=args.sample_interval,
        window_minutes=thresholds.window_minutes,
        probe=probe,
    )
    return Assembly(
        facts=facts,
        sampler=sampler,
        thresholds=thresholds,
        probe=probe,
        kube=kres,
        top_k=getattr(args, "probe_top_k", 3),
    )
