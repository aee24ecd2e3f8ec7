"""The sampler: one pass over every tracked cgroup, and the loop that repeats it.

Each pass (:meth:`Sampler.run_once`) discovers cgroups, reads each tracked one once,
reads the node, polls the scheduler probe, folds every delta into the window
(``exporter.window``) and returns an immutable :class:`Snapshot`. :meth:`Sampler.run`
is the loop: a pass every ``interval`` seconds, each handed to a callback (the agent
evaluates findings and publishes the pass); the exporter runs it in a thread and
``diagnose`` in the foreground, so both see the same passes.

Errors are per cgroup: a cgroup that vanishes mid-read or has a malformed file is
skipped, counted by reason and logged once; the pass and the scrape go on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..cgroupfs.discovery import CgroupKind, CgroupRef, K8sCgroup, classify, walk
from ..cgroupfs.errors import CgroupParseError, CgroupVanishedError
from ..cgroupfs.mode import NodeFacts
from ..cgroupfs.procfs import read_node
from ..cgroupfs.reader import CgroupReader
from ..identity import HostIdentityResolver, Identity, IdentityResolver
from ..probe.fold import ProbeFolds, ProbeSnapshot
from ..window.fold import WindowFolds
from ..window.model import CulpritKey, Window
from .departed import Departed
from .entitlement import cpu_entitlement, cpu_limit_cores, memory_entitlement, memory_limit_bytes
from .snapshot import CollectorStatus, ContainerSample, NodeSample, Snapshot

if TYPE_CHECKING:
    from ..probe.fold import Probe

log = logging.getLogger(__name__)

SKIP_REASONS = ("vanished", "malformed", "error")
OnPass = Callable[[Snapshot], object]


class Sampler:
    def __init__(
        self,
        facts: NodeFacts,
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
        self._departed = Departed(Departed.retention_s(window_minutes, interval))
        self._skipped = dict.fromkeys(SKIP_REASONS, 0)
        self._warned: set[tuple[str, str]] = set()
        self._passes = 0
        # One pass at a time; window() and blame_in_progress() read consistent state.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._classify_cache: dict[str, tuple[CgroupKind, K8sCgroup | None]] = {}
        # Sub-cgroups of tracked cgroups -> their tracked owner (the probe sees tasks in
        # the leaf cgroup they run in; their waits and blame belong to the owner).
        self._owned: dict[int, int] = {}
        self._all_ids: set[int] = set()
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
    ) -> int:
        """The loop: a pass every ``interval`` seconds, each handed to ``on_pass``,
        until ``stop`` is set or the monotonic deadline ``until`` has passed (the first
        pass always runs). A failing pass or callback is logged and the loop goes on.
        Returns the number of passes run."""
        stop = stop if stop is not None else self._stop
        passes = 0
        while True:
            started = time.monotonic()
            try:
                on_pass(self.run_once())
            except Exception as e:  # a bug must not kill the exporter: log and go on
                log.error("sampler pass failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
            passes += 1
            now = time.monotonic()
            wait = max(0.0, self.interval - (now - started))
            if until is not None:
                if now >= until:
                    return passes
                wait = min(wait, until - now)
            if stop.wait(wait):
                return passes

    def start(self, on_pass: OnPass) -> None:
        """Run the loop in a background thread until :meth:`stop`."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, args=(on_pass,), name="sampler", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- one pass ---------------------------------------------------------------

    def run_once(self, now: float | None = None) -> Snapshot:
        with self._lock:
            return self._run_once(now)

    def _run_once(self, now: float | None) -> Snapshot:
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        collectors: dict[str, CollectorStatus] = {}

        t = time.perf_counter()
        node, ok = self._read_node()
        collectors["node"] = CollectorStatus(ok, time.perf_counter() - t)

        t = time.perf_counter()
        containers, ok = self._read_cgroups(now)
        collectors["cgroups"] = CollectorStatus(ok, time.perf_counter() - t)

        probe_snapshot = None
        if self._probe_folds is not None:
            t = time.perf_counter()
            probe_snapshot, ok = self._poll_probe(containers)
            collectors["probe"] = CollectorStatus(ok, time.perf_counter() - t)

        self.folds.fold_node(
            node.proc_stat, node.cpu_pressure, node.memory_pressure, node.io_pressure, now
        )
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
            log.warning("scheduler probe read failed: %s", e)
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
        node = NodeSample(
            proc_stat=r.proc_stat,
            cpu_pressure=r.cpu_pressure,
            memory_pressure=r.memory_pressure,
            io_pressure=r.io_pressure,
            cpu_cores=self.cpu_cores,
            memory_bytes=self.memory_bytes,
        )
        return node, r.ok

    def _classify(self, path: str) -> tuple[CgroupKind, K8sCgroup | None]:
        hit = self._classify_cache.get(path)
        if hit is None:
            hit = self._classify_cache[path] = classify(path)
        return hit

    def _read_cgroups(self, now: float) -> tuple[list[ContainerSample], bool]:
        if self.reader is None or self.facts.v2_root is None:
            return [], not self.facts.supported and self.facts.v2_root is None
        self.resolver.refresh()  # e.g. re-read a metadata file once per pass
        out: list[ContainerSample] = []
        seen: set[int] = set()
        others: dict[int, Identity] = {}
        owned: dict[int, int] = {}
        all_ids: set[int] = set()
        for ref in walk(
            self.facts.v2_root, descendants=self.probe is not None, classifier=self._classify
        ):
            all_ids.add(ref.id)
            if ref.owner is not None:
                owned[ref.id] = ref.owner
                continue
            if not ref.tracked:
                if ref.kind in (CgroupKind.ROOT, CgroupKind.POD):
                    others[ref.id] = self.resolver.resolve(ref)
                continue
            ident = self.resolver.resolve(ref)
            if ident.opted_out:
                others[ref.id] = ident  # not sampled, still nameable as a culprit
                continue
            sample = self._read_one(ref, ident, now)
            if sample is not None:
                out.append(sample)
                seen.add(ref.id)
        self.folds.forget(seen)  # gone cgroups: their series vanish with this pass
        if len(self._classify_cache) > 4 * (len(seen) + 64):
            self._classify_cache.clear()
        self._owned, self._all_ids, self._others = owned, all_ids, others
        self._departed.update({**others, **{c.cgroup_id: c.identity for c in out}}, owned, now)
        return out, True

    def _warn_once(self, path: str, msg: str) -> None:
        key = (path, msg)
        if key not in self._warned:
            if len(self._warned) > 10000:
                self._warned.clear()
            self._warned.add(key)
            log.warning("%s", msg)

    def _read_one(self, ref: CgroupRef, ident: Identity, now: float) -> ContainerSample | None:
        assert self.reader is not None
        try:
            r = self.reader.read(ref.path)
        except CgroupVanishedError:
            self._skipped["vanished"] += 1
            log.debug("cgroup %s vanished while being read", ref.path)
            return None
        except CgroupParseError as e:
            self._skipped["malformed"] += 1
            self._warn_once(ref.path, f"skipping cgroup {ref.path}: {e.reason} ({e.source})")
            return None
        except OSError as e:
            self._skipped["error"] += 1
            self._warn_once(ref.path, f"skipping cgroup {ref.path}: {e}")
            return None

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
        sample.sampled_s = self.folds.fold(ref.id, ident, cpu_limit, mem_limit, sample, now)
        return sample
