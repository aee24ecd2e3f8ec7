"""One self-test run: make the cgroups, start the load, watch the exporter's passes.

The scene (docs/troubleshooting.md): on one CPU, a ``victim`` that does 5 ms of work
every 50 ms with the weight of a 100m request, and a ``bully`` with one busy loop, no
request and the default weight, ten times the victim's, so a noisy-neighbor finding
must name the bully; where the node lets us set a quota, a ``limited``
container (four busy loops under a 200m limit, on another CPU when there is one) that
must come out cpu-throttled. The exporter's own sampler, window and probe observe
them; the findings are evaluated on that window with the packaged thresholds but a
one-minute window and sustain (:func:`selftest_thresholds`), the shortest a finding
can be decided on. The run ends as soon as every expectation is met, or at its bound.

:class:`Selftest` gets each pass from whoever runs the sampler (``on_pass``): the
``selftest`` command's own agent, or a running exporter's (``POST /selftest``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..cgroupfs.mode import CgroupMode, NodeLayout
from ..findings.aggregates import Clock
from ..findings.evaluate import evaluate
from ..findings.model import Finding, Kind
from ..findings.thresholds import Thresholds
from ..probe.fold import ProbeSnapshot
from ..sampler.snapshot import Snapshot
from ..window.model import Window
from . import DEFAULT_SECONDS, bpfstats
from .cgroups import PREFIX, Role, SelftestCgroups, place, remove_stale
from .hosting import EXIT_UNSUPPORTED, CannotHost, check_layout
from .load import Process, spawn_load, spawn_watchdog
from .report import BLAME_TOLERANCE, Check, Report
from .truth import CpuTruth, Reading

VICTIM, BULLY, LIMITED = "victim", "bully", "limited"
# The victim's cpu.shares: what the kubelet gives a 100m request (the bully, with no
# request, keeps the kernel's default of 1024, ten times as much).
VICTIM_SHARES = 102
# Where the self-test's cgroups get no CPU weight (nested without a cpu controller):
# nice 10 is the kernel's weight 110, to the bully's 1024 at nice 0.
VICTIM_NICE = 10
LIMIT_CORES = 0.2


def selftest_thresholds(base: Thresholds) -> Thresholds:
    """``base`` with a one-minute window and sustain: every other threshold as set."""
    return dataclasses.replace(base, window_minutes=1, sustain_minutes=1)


class Walker(Protocol):
    """The sampler, told which trees to walk as their own (discovery.walk's
    ``subtrees``): the self-test's, when they are nested in a tracked cgroup."""

    subtrees: set[str]


@dataclass
class Options:
    seconds: float = DEFAULT_SECONDS  # the bound of the whole run
    prefix: str = PREFIX  # tests use contention-test-selftest-
    procfs: str = "/proc"
    top_k: int = 3
    sampler: Walker | None = None
    proc_self: str = "/proc/self"  # this process's cgroup and mounts (tests: a fixture)


def _cpus() -> tuple[int, int | None]:
    """The CPU the victim and the bully share (the last one) and the limited one's."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1], (cpus[0] if len(cpus) > 1 else None)


class Selftest:
    """The scene and its expectations; :meth:`on_pass` judges each pass."""

    def __init__(self, layout: NodeLayout, thresholds: Thresholds, options: Options) -> None:
        check_layout(layout)
        self.layout, self.options = layout, options
        self.th = selftest_thresholds(thresholds)
        self.report = Report(node={"cgroups": layout.mode.value, "kernel": platform.release()})
        self.cpu, self.other_cpu = _cpus()
        assert layout.v2_root is not None  # check_layout
        placement = place(layout.v2_root, options.proc_self)
        self.report.placement = placement.why
        self.cgroups = SelftestCgroups(layout, f"{options.prefix}{os.getpid()}", (), placement)
        weights = self.cgroups.weights_supported()
        # Nested without a cpu controller below the base (cgroups.py says why it is not
        # enabled there): the victim's lower weight is a nice value instead.
        self.victim_nice = VICTIM_NICE if not weights and placement.nested else None
        if not weights and not placement.nested:
            raise CannotHost(
                EXIT_UNSUPPORTED,
                f"the cpu controller is not available to cgroups under {layout.v2_root} "
                "(not enabled in its cgroup.subtree_control; the self-test does not change "
                "it): without CPU weights no request can be honoured, and the self-test "
                "cannot give its victim one",
            )
        self.quota = self.cgroups.quota_supported()
        roles = [Role(VICTIM, shares=VICTIM_SHARES if weights else None), Role(BULLY)]
        if self.quota:
            roles.append(Role(LIMITED, quota_cores=LIMIT_CORES))
        self.cgroups.roles = tuple(roles)
        self.done = threading.Event()
        self.started_at: float | None = None  # monotonic, when the load ran
        self._procs: list[Process] = []
        self._watchdog: Process | None = None
        self._watch_fd: int | None = None
        self._stats = bpfstats.StatsHold("off: not started")
        self._readings: list[tuple[float, Reading]] = []  # (epoch, reading)
        self._first_probe: ProbeSnapshot | None = None
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._checks = {
            "noisy": Check(
                "noisy-neighbor",
                f"victim {self.cgroups.path(VICTIM)} names {self.cgroups.path(BULLY)}",
            ),
            "blame": Check(
                "blame share",
                f"within {BLAME_TOLERANCE * 100:.0f} points of the kernel's CPU accounting",
            ),
            "throttled": Check(
                "cpu-throttled",
                f"{self.cgroups.path(LIMITED)} (limit {LIMIT_CORES * 1000:.0f}m) throttled",
            ),
        }
        if not self.quota and self.victim_nice is not None and layout.mode is CgroupMode.V2:
            self._checks["throttled"].skipped = (
                f"skipped: no cpu controller below {placement.base}, the cgroup the "
                "self-test nests in (a cgroup namespace): it does not enable one there, "
                "as the exporter's own process is in that cgroup (docs/troubleshooting.md)"
            )
        elif not self.quota and self.victim_nice is not None:
            self._checks["throttled"].skipped = (
                f"skipped: the v1 cpu hierarchy has no cgroup {placement.base}, the one the "
                "self-test nests in (a cgroup namespace), and v1 controllers are read at "
                "the cgroup2 path"
            )
        elif not self.quota:
            self._checks["throttled"].skipped = (
                "skipped: this kernel has no CPU quota (CFS bandwidth control) for the "
                "self-test's cgroups"
            )
        self.report.checks = list(self._checks.values())

    # -- the scene ----------------------------------------------------------------------

    def start(self) -> None:
        """Watchdog first, then the cgroups, then the load. On failure everything made
        so far is removed before the error propagates."""
        with contextlib.suppress(OSError):
            remove_stale(self.layout, self.options.prefix, bases=self.cgroups.bases)
        if self.options.sampler is not None and self.cgroups.placement.nested:
            self.options.sampler.subtrees = self.options.sampler.subtrees | {self.cgroups.rel}
        try:
            self._watchdog, self._watch_fd = spawn_watchdog(self.cgroups.roots)
            self.cgroups.create()
            bound = self.options.seconds + 30.0  # the load outlives no run by more
            cg = self.cgroups
            self._procs.append(
                spawn_load(
                    VICTIM,
                    cg.procs_files(VICTIM),
                    bound,
                    self.cpu,
                    ["periodic", "--work-ms", "5", "--period-ms", "50"],
                    nice=self.victim_nice,
                )
            )
            self._procs.append(
                spawn_load(
                    BULLY, cg.procs_files(BULLY), bound, self.cpu, ["busy", "--threads", "1"]
                )
            )
            if self.quota:
                self._procs.append(
                    spawn_load(
                        LIMITED,
                        cg.procs_files(LIMITED),
                        bound,
                        self.other_cpu,
                        ["busy", "--threads", "4"],
                    )
                )
            self._ids = {r.name: cg.cgroup_id(r.name) for r in cg.roles}
            self._truth = CpuTruth(
                cg.v2_dir(VICTIM), cg.v2_dir(BULLY), self.cpu, self.options.procfs
            )
            self._stats = bpfstats.enable_stats()
            self.report.bpf_stats = self._stats.how
            self.started_at = time.monotonic()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End the load, remove the cgroups, restore BPF statistics. Idempotent."""
        for p in self._procs:
            p.kill()
        if any(os.path.exists(r) for r in self.cgroups.roots):
            self.report.left_behind = self.cgroups.remove()
        if self.options.sampler is not None:
            self.options.sampler.subtrees = self.options.sampler.subtrees - {self.cgroups.rel}
        self._stats.release()
        if self._watch_fd is not None:
            os.close(self._watch_fd)  # the watchdog finds nothing left and exits
            self._watch_fd = None
        if self._watchdog is not None:
            with contextlib.suppress(Exception):
                self._watchdog.popen.wait(15.0)
            self._watchdog.kill()
            self._watchdog = None
        self._procs = []

    def expired(self) -> bool:
        return self.started_at is not None and (
            time.monotonic() - self.started_at >= self.options.seconds
        )

    # -- each pass ----------------------------------------------------------------------

    def on_pass(self, snap: Snapshot, window: Window | None) -> None:
        """Judge one pass of the exporter (called in the sampler's thread)."""
        if self.started_at is None or window is None or self.done.is_set():
            return
        with self._lock:
            self._readings.append((snap.taken_at, self._truth.read()))
            self._probe(snap.probe)
            findings = evaluate(window, self.th, snap.taken_at, self.options.top_k)
            self._judge(findings, window, snap.taken_at)
            for p in self._procs:
                if not p.alive():
                    self.report.problems.append(f"the {p.name} load process died early")
                    self.done.set()
            if self.expired() or all(c.ok or c.skipped for c in self.report.checks):
                self.done.set()

    def _probe(self, probe: ProbeSnapshot | None) -> None:
        if probe is None:
            self.report.probe = "not configured (--no-probe, or compute not supported)"
            return
        st = probe.status
        self.report.probe_loaded = st.loaded
        self.report.probe = (
            f"{st.loader} loader, {st.attribution} attribution"
            if st.loaded
            else f"{st.reason}: {st.detail}"
        )
        if not st.loaded or not self._stats.on:
            return
        if self._first_probe is None:
            self._first_probe = probe
            return
        a, b = self._first_probe.totals, probe.totals
        self.report.probe_ns_per_switch = bpfstats.ns_per_switch(
            a.programs, b.programs, b.context_switches - a.context_switches
        )

    def _seen(self, check: Check, text: str, ok: bool) -> None:
        if check.ok:
            return  # the first pass that met it is the one reported
        check.ok, check.seen = ok, text
        if ok and self.started_at is not None:
            check.seconds = time.monotonic() - self.started_at
            first = self.report.time_to_first_finding_s
            if first is None or check.seconds < first:
                self.report.time_to_first_finding_s = check.seconds

    def _judge(self, findings: list[Finding], window: Window, now: float) -> None:
        mine = {v: [f for f in findings if f.victim.cgroup_id == i] for v, i in self._ids.items()}
        noisy, blame = self._checks["noisy"], self._checks["blame"]
        for f in mine.get(VICTIM, []):
            c = f.culprit
            ok = f.kind is Kind.NOISY_NEIGHBOR and c is not None and c.cgroup_id == self._ids[BULLY]
            who = c.identity.cgroup if c is not None else "nobody"
            self._seen(noisy, f"{f.kind.value} ({f.severity.value}) naming {who}", ok)
            if ok and c is not None and not blame.ok:
                self._blame(c.blame_share, now, window)
        if LIMITED in mine and not self._checks["throttled"].ok:
            for f in mine[LIMITED]:
                ok = f.kind is Kind.CPU_THROTTLED
                self._seen(self._checks["throttled"], f"{f.kind.value} ({f.severity.value})", ok)

    def _blame(self, share: float, now: float, window: Window) -> None:
        """The finding's blame share against the kernel's over the same minutes."""
        clock = Clock.at(now, self.th, window)
        start = clock.window[0]
        a = min(self._readings, key=lambda r: abs(r[0] - start))[1]
        b = self._readings[-1][1]
        truth = CpuTruth.between(a, b).bully_share
        self.report.blame_share, self.report.truth_share = share, truth
        check = self._checks["blame"]
        if truth is None:
            self._seen(check, "the kernel's accounting shows no CPU time but the victim's", False)
            return
        diff = abs(share - truth)
        self._seen(
            check,
            f"{share * 100:.1f}% vs {truth * 100:.1f}% ({diff * 100:.1f} points)",
            diff <= BLAME_TOLERANCE,
        )

    def finish(self) -> Report:
        """Stop everything and return the report (call once ``done`` is set)."""
        self.stop()
        if self.started_at is not None:
            self.report.duration_s = time.monotonic() - self.started_at
        for c in self.report.checks:
            if c.ok is None and not c.skipped:
                c.ok = False
                c.seen += f" within {self.options.seconds:.0f} s"
        return self.report


def run_with(
    test: Selftest, drive: Callable[[Callable[[Snapshot, Window | None], None]], None]
) -> Report:
    """Start the scene, let ``drive`` feed passes to :meth:`Selftest.on_pass` until
    ``test.done`` is set, and always clean up."""
    try:
        test.start()
        drive(test.on_pass)
    finally:
        test.stop()
    return test.finish()


__all__ = ["CannotHost", "Options", "Selftest", "run_with", "selftest_thresholds"]
