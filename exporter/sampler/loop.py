"""The sampler: one pass over every tracked cgroup, and the loop that repeats it.

Each pass (:meth:`Sampler.run_once`) discovers cgroups, reads each tracked one once,
reads the node, polls the scheduler probe, folds every delta into the window
(``exporter.window``) and returns an immutable :class:`Snapshot`. :meth:`Sampler.run`
is the loop: a pass every ``interval`` seconds, each handed to a callback (the agent
evaluates findings and publishes the pass); the exporter runs it in a thread and
``diagnose`` in the foreground, so both see the same passes.

Errors cost as little as they can: a cgroup that vanishes mid-read, has a malformed
file, counters that moved impossibly, or cannot be read is skipped for that pass,
counted by reason and logged once (per cgroup and reason, until it reads again); a
directory that cannot be listed is counted the same way, and its cgroups keep their
window until it can. A part of the pass that fails (the node's files, every cgroup,
the probe) costs that part, said in its collector status; a pass that fails as a
whole is counted and logged, and the loop goes on.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..cgroupfs.discovery import CgroupKind, CgroupRef, K8sCgroup, classify, walk
from ..cgroupfs.errors import CgroupParseError, CgroupVanishedError
from ..cgroupfs.mode import NodeLayout
from ..cgroupfs.procfs import NodeReading, read_node
from ..cgroupfs.reader import CgroupReader
from ..identity import HostIdentityResolver, Identity, IdentityResolver
from ..probe.fold import ProbeFolds, ProbeSnapshot
from ..window.fold import ImplausibleSample, WindowFolds
from ..window.model import CulpritKey, Window
from .departed import Departed
from .entitlement import cpu_entitlement, cpu_limit_cores, memory_entitlement, memory_limit_bytes
from .snapshot import CollectorStatus, ContainerSample, LostCgroup, NodeSample, Snapshot

if TYPE_CHECKING:
    from ..probe.fold import Probe

log = logging.getLogger(__name__)

# Why a cgroup was not sampled in a pass (contention_sampler_skipped_cgroups_total):
# vanished (removed while being read: churn, not a failure); malformed (a file not in
# the kernel's format or range, or not a regular file); implausible (counters moved in
# a way the kernel cannot produce); unreadable (permission denied on its files, or a
# directory of cgroups that cannot be listed); error (any other failure).
SKIP_REASONS = ("vanished", "malformed", "implausible", "unreadable", "error")
_DENIED = (errno.EACCES, errno.EPERM)
OnPass = Callable[[Snapshot], object]
OnFailure = Callable[[str], object]


class Sampler:
    def __init__(
        self,
        facts: NodeLayout,
        procfs: str = "/proc",
        resolver: IdentityResolver | None = None,
        interval: float = 5.0,
        window_minutes: int = 5,
        probe: Probe | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.facts = facts
        self.procfs = procfs
        self.resolver: IdentityResolver = resolver or HostIdentityResolver()
        self.interval = interval
        self.window_minutes = window_minutes
        self.probe = probe
        self.clock = clock
        self.reader = CgroupReader(facts) if facts.v2_root is not None else None
        self.folds = WindowFolds(window_minutes)
        self._probe_folds = ProbeFolds(probe) if probe is not None else None
        self._others: dict[int, Identity] = {}
        # Culprits whose cgroup went away keep their names while their blame counts.
        # Only blame names culprits: without a probe there is nothing to keep them for
        # (retention 0 forgets them at the next pass), and memory stays flat under churn.
        self._departed = Departed(
            Departed.retention_s(window_minutes, interval) if probe is not None else 0.0
        )
        self._skipped = dict.fromkeys(SKIP_REASONS, 0)
        # What was logged, per cgroup path ("node" for the node's files): a reason is
        # logged once until the cgroup reads again; forgotten with the cgroup.
        self._warned: dict[str, set[str]] = {}
        self._passes = 0
        self.failed_passes = 0  # passes that failed as a whole
        self.last_failure = ""
        # One pass at a time; window() and blame_in_progress() read consistent state.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Paths seen in this pass and the last: bounded by what exists, not by churn.
        self._classify_cache: dict[str, tuple[CgroupKind, K8sCgroup | None]] = {}
        self._classify_last: dict[str, tuple[CgroupKind, K8sCgroup | None]] = {}
        # Tracked cgroups of the last pass (id -> path): a directory that cannot be
        # listed keeps the windows of the cgroups last seen below it.
        self._tracked_paths: dict[int, str] = {}
        # Sub-cgroups of tracked cgroups -> their tracked owner (the probe sees tasks in
        # the leaf cgroup they run in; their waits and blame belong to the owner).
        self._owned: dict[int, int] = {}
        self._all_ids: set[int] = set()
        # Trees walked as their own even below a tracked cgroup (the self-test's,
        # nested in the exporter's own container: discovery.walk's ``subtrees``).
        self.subtrees: set[str] = set()
        self.cpu_cores = float(os.cpu_count() or 1)
        self.memory_bytes = 0

    # -- public -----------------------------------------------------------------

    @property
    def passes(self) -> int:
        return self._passes

    def window(self) -> Window:
        """The last ``window_minutes`` complete minutes, for the finding evaluator.
        ``probe_loaded`` is the probe's state now: read it in the pass (the agent
        does), not after the probe was closed."""
        with self._lock:
            loaded = self.probe is not None and self.probe.loaded
            others = {**self._departed.names(), **self._others}
            return self.folds.window(self.cpu_cores, self.memory_bytes, others, loaded)

    def set_window_minutes(self, minutes: int) -> None:
        """Keep this many complete minutes from now on (the thresholds changed)."""
        with self._lock:
            self.window_minutes = minutes
            self.folds.set_minutes(minutes)

    def blame_in_progress(self) -> dict[int, dict[CulpritKey, float]]:
        """Each tracked cgroup's blame in the minute that is not complete yet."""
        with self._lock:
            return self.folds.blame_in_progress()

    def run(
        self,
        on_pass: OnPass,
        *,
        until: float | None = None,
        stop: threading.Event | None = None,
        on_failure: OnFailure | None = None,
    ) -> int:
        """The loop: a pass every ``interval`` seconds, each handed to ``on_pass``,
        until ``stop`` is set or the monotonic deadline ``until`` has passed (the first
        pass always runs). A pass that fails is counted, logged and told to
        ``on_failure``; a failing callback is logged; the loop goes on either way.
        Returns the number of passes run."""
        stop = stop if stop is not None else self._stop
        passes = 0
        while True:
            started = time.monotonic()
            snap = self.try_pass()
            if snap is None:
                if on_failure is not None:
                    on_failure(self.last_failure)
            else:
                try:
                    on_pass(snap)
                except Exception as e:  # a bug must not kill the exporter: log and go on
                    log.error(
                        "publishing a sampler pass failed: %s",
                        _describe(e),
                        exc_info=log.isEnabledFor(logging.DEBUG),
                    )
            passes += 1
            now = time.monotonic()
            wait = max(0.0, self.interval - (now - started))
            if until is not None:
                if now >= until:
                    return passes
                wait = min(wait, until - now)
            if stop.wait(wait):
                return passes

    def start(self, on_pass: OnPass, on_failure: OnFailure | None = None) -> None:
        """Run the loop in a background thread until :meth:`stop`."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run,
            args=(on_pass,),
            kwargs={"on_failure": on_failure},
            name="sampler",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- one pass ---------------------------------------------------------------

    def run_once(self, now: float | None = None) -> Snapshot:
        """One pass. Raises only for a failure no part of the pass could contain (a
        bug); :meth:`try_pass` counts and logs that instead."""
        with self._lock:
            return self._run_once(now)

    def try_pass(self, now: float | None = None) -> Snapshot | None:
        """One pass, or None when it failed as a whole: counted in ``failed_passes``,
        logged, and said in ``last_failure``."""
        try:
            return self.run_once(now)
        except Exception as e:
            self.failed_passes += 1
            self.last_failure = _describe(e)
            log.error(
                "sampler pass failed: %s",
                self.last_failure,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            return None

    def _run_once(self, now: float | None) -> Snapshot:
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        collectors: dict[str, CollectorStatus] = {}

        t = time.perf_counter()
        try:
            node, ok = self._read_node()
        except Exception as e:  # the node's files cost only the node's part
            self._warn_once("node", f"reading the node failed: {_describe(e)}")
            node, ok = self._node_sample(None), False
        collectors["node"] = CollectorStatus(ok, time.perf_counter() - t)

        t = time.perf_counter()
        lost: list[LostCgroup] = []
        try:
            containers, ok = self._read_cgroups(now, lost)
        except Exception as e:  # a bug in the walk costs this pass's cgroups, not the pass
            self._warn_once("node", f"reading the cgroups failed: {_describe(e)}")
            containers, ok = [], False
        collectors["cgroups"] = CollectorStatus(ok, time.perf_counter() - t)

        probe_snapshot = None
        if self._probe_folds is not None:
            t = time.perf_counter()
            probe_snapshot, ok = self._poll_probe(containers)
            collectors["probe"] = CollectorStatus(ok, time.perf_counter() - t)

        try:
            refused = self.folds.fold_node(
                node.proc_stat,
                node.cpu_pressure,
                node.memory_pressure,
                node.io_pressure,
                now,
                self.cpu_cores,
            )
        except Exception as e:
            refused = [f"folding the node's counters failed: {_describe(e)}"]
        for why in refused:
            self._warn_once("node", why)
        self._passes += 1
        return Snapshot(
            taken_at=now,
            pass_duration_s=time.perf_counter() - t0,
            facts=self.facts,
            containers=tuple(containers),
            node=node,
            skipped_total=dict(self._skipped),
            collectors=collectors,
            identity_staleness_s=self.resolver.staleness_seconds(),
            passes_total=self._passes,
            probe=probe_snapshot,
            lost=tuple(lost),
            failed_passes_total=self.failed_passes,
        )

    def _poll_probe(self, containers: list[ContainerSample]) -> tuple[ProbeSnapshot | None, bool]:
        assert self._probe_folds is not None
        try:
            snap = self._probe_folds.pass_(
                {c.cgroup_id for c in containers},
                {**self._departed.owned(), **self._owned},
                self._all_ids,
                self.folds.current(),
                self._passes,
            )
        except Exception as e:
            log.warning("scheduler probe read failed: %s", _describe(e))
            return None, False
        return snap, True

    def _read_node(self) -> tuple[NodeSample, bool]:
        r = read_node(self.procfs, meminfo=not self.memory_bytes)
        for problem in r.problems:
            self._warn_once("node", problem)
        if r.meminfo_problem:
            self._warn_once("node", r.meminfo_problem)
        if r.memory_total_bytes:
            self.memory_bytes = r.memory_total_bytes
        if r.proc_stat is not None and r.proc_stat.cpus:
            self.cpu_cores = float(r.proc_stat.cpus)
        if r.proc_stat is not None and r.proc_stat.steal_ticks is None:
            self._warn_once(
                "node",
                f"{self.procfs}/stat has no steal column (a kernel before 2.6.11?): node CPU "
                "steal and the cpu-steal finding are not available",
            )
        return self._node_sample(r), r.ok

    def _node_sample(self, r: NodeReading | None) -> NodeSample:
        return NodeSample(
            proc_stat=r.proc_stat if r else None,
            cpu_pressure=r.cpu_pressure if r else None,
            memory_pressure=r.memory_pressure if r else None,
            io_pressure=r.io_pressure if r else None,
            cpu_cores=self.cpu_cores,
            memory_bytes=self.memory_bytes,
        )

    def _classify(self, path: str) -> tuple[CgroupKind, K8sCgroup | None]:
        hit = self._classify_cache.get(path)
        if hit is None:
            hit = self._classify_last.get(path) or classify(path)
            self._classify_cache[path] = hit
        return hit

    def _read_cgroups(
        self, now: float, lost: list[LostCgroup]
    ) -> tuple[list[ContainerSample], bool]:
        """Every tracked cgroup's sample; what could not be sampled goes to ``lost``
        (and the skip counters). Succeeds when nothing but vanished cgroups was lost."""
        if self.reader is None or self.facts.v2_root is None:
            return [], not self.facts.supported and self.facts.v2_root is None
        try:
            self.resolver.refresh()  # e.g. re-read a metadata file once per pass
        except Exception as e:  # names may be stale this pass; sampling goes on
            self._warn_once("node", f"refreshing cgroup identities failed: {_describe(e)}")
        acc = _Walked(lost)
        self.reader.begin_pass()

        def on_unlisted(path: str, e: OSError) -> None:
            acc.unlisted.append(path)
            self._lose(lost, path, "unreadable", f"cannot list the directory: {_describe(e)}")

        self._classify_last, self._classify_cache = self._classify_cache, {}
        for ref in walk(
            self.facts.v2_root,
            descendants=self.probe is not None,
            classifier=self._classify,
            on_unlisted=on_unlisted,
            subtrees=tuple(self.subtrees),
        ):
            self._visit(ref, acc, now)
        # Gone cgroups: their windows (and series) go. A cgroup that failed this pass
        # still exists and keeps its window, and so do the cgroups last seen below a
        # directory that cannot be listed now.
        keep = acc.sampled | acc.failed
        unlisted = acc.unlisted
        if unlisted:
            hidden = {c: p for c, p in self._tracked_paths.items() if _below(p, unlisted)}
            keep |= hidden.keys()
            acc.tracked.update(hidden)
            acc.paths.update(hidden.values())
        self.folds.forget(keep, now)
        self._tracked_paths = acc.tracked
        acc.paths.update(unlisted)
        self._warned = {
            p: w for p, w in self._warned.items() if p in acc.paths or _below(p, unlisted)
        }
        self._owned, self._all_ids, self._others = acc.owned, acc.all_ids, acc.others
        named = {**acc.others, **{c.cgroup_id: c.identity for c in acc.out}}
        self._departed.update(named, acc.owned, now)
        return acc.out, not unlisted and all(x.reason == "vanished" for x in lost)

    def _visit(self, ref: CgroupRef, acc: _Walked, now: float) -> None:
        """One cgroup of the walk: note it, name it, and sample it if it is tracked."""
        acc.all_ids.add(ref.id)
        if ref.owner is not None:
            acc.owned[ref.id] = ref.owner
            return
        if not ref.tracked and ref.kind not in (CgroupKind.ROOT, CgroupKind.POD):
            return
        acc.paths.add(ref.path)
        try:
            ident = self.resolver.resolve(ref)
        except Exception as e:  # one cgroup's naming costs that cgroup only
            if ref.tracked:
                acc.failed.add(ref.id)
                self._lose(acc.lost, ref.path, "error", f"naming it failed: {_describe(e)}")
            return
        if not ref.tracked:
            acc.others[ref.id] = ident
            return
        acc.tracked[ref.id] = ref.path
        if ident.opted_out:
            acc.others[ref.id] = ident  # not sampled, still nameable as a culprit
            return
        sample = self._read_one(ref, ident, now, acc.lost)
        if sample is None:
            acc.failed.add(ref.id)
        else:
            acc.out.append(sample)
            acc.sampled.add(ref.id)
            self._warned.pop(ref.path, None)  # it reads again: warn anew next time

    def _lose(self, lost: list[LostCgroup], path: str, reason: str, detail: str) -> None:
        """Count one cgroup (or directory) not sampled in this pass, and log it once."""
        self._skipped[reason] += 1
        lost.append(LostCgroup(path, reason, detail))
        if reason == "vanished":
            log.debug("cgroup %s vanished while being read", path)
            return
        warned = self._warned.setdefault(path, set())
        if reason not in warned:
            warned.add(reason)
            log.warning("skipping cgroup %s (%s): %s", path, reason, detail)

    def _warn_once(self, path: str, msg: str) -> None:
        warned = self._warned.setdefault(path, set())
        if msg not in warned:
            if len(warned) > 100:  # messages that keep changing: start over
                warned.clear()
            warned.add(msg)
            log.warning("%s", msg)

    def _read_one(
        self, ref: CgroupRef, ident: Identity, now: float, lost: list[LostCgroup]
    ) -> ContainerSample | None:
        """One cgroup's sample, or None (counted in ``lost``): whatever goes wrong
        while reading or folding it costs this cgroup, for this pass."""
        try:
            return self._sample(ref, ident, now)
        except CgroupVanishedError:
            self._lose(lost, ref.path, "vanished", "removed while being read")
        except CgroupParseError as e:
            self._lose(lost, ref.path, "malformed", f"{e.reason} ({e.source})")
        except ImplausibleSample as e:
            self._lose(lost, ref.path, "implausible", str(e))
        except OSError as e:
            reason = "unreadable" if e.errno in _DENIED else "error"
            self._lose(lost, ref.path, reason, _describe(e))
        except Exception as e:  # a bug: it must cost this cgroup only
            self._lose(lost, ref.path, "error", f"unexpected {_describe(e)}")
        return None

    def _sample(self, ref: CgroupRef, ident: Identity, now: float) -> ContainerSample:
        assert self.reader is not None
        r = self.reader.read(ref.path)

        # Throttling: v2 cpu.stat when the cpu controller is on, else the v1 cpu cgroup.
        periods = throttled = throttled_us = None
        if r.cpu_stat is not None and r.cpu_stat.nr_periods is not None:
            periods, throttled = r.cpu_stat.nr_periods, r.cpu_stat.nr_throttled
            throttled_us = r.cpu_stat.throttled_usec
        elif r.cpu_stat_v1 is not None:
            periods, throttled = r.cpu_stat_v1.nr_periods, r.cpu_stat_v1.nr_throttled
            throttled_us = r.cpu_stat_v1.throttled_time_ns // 1000

        cpu_limit = cpu_limit_cores(r, ident)
        mem_limit = memory_limit_bytes(r, ident)
        working_set = None
        if r.memory_current is not None:
            inactive = r.memory_stat.inactive_file if r.memory_stat is not None else 0
            working_set = max(0, r.memory_current - inactive)
        sample = ContainerSample(
            cgroup_id=ref.id,
            identity=ident,
            reading=r,
            cpu_limit_cores=cpu_limit,
            cpu_entitlement=cpu_entitlement(cpu_limit, ident, self.cpu_cores),
            memory_limit_bytes=mem_limit,
            memory_entitlement=memory_entitlement(mem_limit, ident, self.memory_bytes),
            periods=periods,
            throttled_periods=throttled,
            throttled_usec=throttled_us,
            working_set_bytes=working_set,
        )
        sample.sampled_s = self.folds.fold(
            ref.id, ident, cpu_limit, mem_limit, sample, now, self.cpu_cores
        )
        return sample


@dataclass(slots=True)
class _Walked:
    """What one pass's walk over the cgroups found."""

    lost: list[LostCgroup]
    out: list[ContainerSample] = field(default_factory=list)
    sampled: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)  # tracked, exists, not sampled
    unlisted: list[str] = field(default_factory=list)  # directories that could not be listed
    tracked: dict[int, str] = field(default_factory=dict)  # id -> path
    others: dict[int, Identity] = field(default_factory=dict)
    owned: dict[int, int] = field(default_factory=dict)
    all_ids: set[int] = field(default_factory=set)
    paths: set[str] = field(default_factory=lambda: {"node"})  # for pruning warnings


def _below(path: str, dirs: Iterable[str]) -> bool:
    """Whether ``path`` lies below one of ``dirs`` (cgroup paths; "/" is the root)."""
    return any(d == "/" or path.startswith(d + "/") for d in dirs)


def _describe(e: BaseException) -> str:
    """An exception as one log line: its type when the message alone would not say."""
    text = str(e).splitlines()[0] if str(e) else ""
    if isinstance(e, OSError) and e.strerror:
        text = f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return text if isinstance(e, OSError | ValueError) and text else f"{type(e).__name__}: {text}"
