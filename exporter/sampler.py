"""The sampler: one pass over every tracked cgroup, deltas, and the 5-minute window.

A background thread runs :meth:`Sampler.run_once` every ``interval`` seconds. Each
pass discovers cgroups, reads each tracked one once, and publishes an immutable
:class:`Snapshot`; ``/metrics`` renders from the latest snapshot only, so a scrape is
cheap (no file I/O) and consistent (every series comes from the same pass). The same
pass folds deltas into per-minute :class:`~exporter.window.MinuteFold`s, the input of
the finding evaluator.

Errors are per cgroup: a cgroup that vanishes mid-read or has a malformed file is
skipped, counted by reason and logged once; the pass and the scrape go on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .cgroupfs import parsers
from .cgroupfs.discovery import CgroupKind, CgroupRef, K8sCgroup, classify, walk
from .cgroupfs.errors import CgroupParseError, CgroupVanishedError
from .cgroupfs.mode import NodeFacts
from .cgroupfs.model import CgroupReading, Pressure, PressureLine, ProcStat
from .cgroupfs.reader import CgroupReader, read_text
from .identity import HostIdentityResolver, Identity, IdentityResolver
from .window import ContainerWindow, CulpritKey, MinuteFold, NodeFold, Window

if TYPE_CHECKING:
    from .probe import ProbeStatus, ProbeTotals, RunqHistogram, SchedProbe

log = logging.getLogger(__name__)

USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SKIP_REASONS = ("vanished", "malformed", "error")


@dataclass(slots=True)
class Entitlement:
    value: float
    basis: str  # limit | request | node


@dataclass(slots=True)
class ContainerSample:
    """One tracked cgroup in one pass: its identity, raw reading and derived values."""

    cgroup_id: int
    identity: Identity
    reading: CgroupReading
    cpu_limit_cores: float | None
    cpu_entitlement: Entitlement
    memory_limit_bytes: int | None
    memory_entitlement: Entitlement
    periods: int | None
    throttled_periods: int | None
    throttled_usec: int | None
    working_set_bytes: int | None
    # Wall-clock seconds covered by this cgroup's deltas since the sampler first saw it
    # (contention_sampled_seconds_total): the denominator that averages a counter over
    # the part of a window the cgroup was watched, right for cgroups younger than it.
    sampled_s: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeSample:
    proc_stat: ProcStat | None
    cpu_pressure: Pressure | None
    memory_pressure: Pressure | None
    io_pressure: Pressure | None
    cpu_cores: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    success: bool
    duration_s: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``/metrics`` shows, from one completed pass."""

    taken_at: float
    pass_duration_s: float
    facts: NodeFacts
    containers: tuple[ContainerSample, ...]
    node: NodeSample
    skipped_total: dict[str, int]
    collectors: dict[str, CollectorStatus]
    identity_staleness_s: float | None
    passes_total: int
    probe: ProbeSnapshot | None = None  # when a probe is configured (loaded or not)


@dataclass(frozen=True, slots=True)
class ProbeSnapshot:
    """The scheduler probe's part of a pass (cumulative; keyed by tracked cgroup id)."""

    status: ProbeStatus
    totals: ProbeTotals
    runq: dict[int, RunqHistogram]


def _delta(cur: int | None, prev: int | None) -> int | None:
    """A counter's increase; None if unknown, 0 if it went backwards (a reset or a
    recreated cgroup: treat as a fresh baseline rather than a huge negative)."""
    if cur is None or prev is None:
        return None
    return cur - prev if cur >= prev else 0


def _psi_delta_s(cur: PressureLine, prev: PressureLine) -> float:
    return (cur.total_usec - prev.total_usec) / 1e6 if cur.total_usec >= prev.total_usec else 0.0


def _add(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None else a + b


def _addi(a: int | None, b: int | None) -> int | None:
    if b is None:
        return a
    return b if a is None else a + b


class Sampler:
    def __init__(
        self,
        facts: NodeFacts,
        procfs: str = "/proc",
        resolver: IdentityResolver | None = None,
        interval: float = 5.0,
        window_minutes: int = 5,
        probe: SchedProbe | None = None,
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
        self._prev: dict[int, tuple[float, ContainerSample]] = {}  # last sight, for deltas
        self._node_prev: dict[str, int] = {}
        self._node_prev_at: float | None = None
        self._windows: dict[int, ContainerWindow] = {}
        self._current: dict[int, MinuteFold] = {}
        self._node_folds: deque[NodeFold] = deque(maxlen=window_minutes)
        self._node_current: NodeFold | None = None
        self._others: dict[int, Identity] = {}
        self._skipped = dict.fromkeys(SKIP_REASONS, 0)
        self._warned: set[tuple[str, str]] = set()
        self._passes = 0
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._classify_cache: dict[str, tuple[CgroupKind, K8sCgroup | None]] = {}
        # Sub-cgroups of tracked cgroups -> their tracked owner (the probe sees tasks in
        # the leaf cgroup they run in; their waits and blame belong to the owner).
        self._owned: dict[int, int] = {}
        self._all_ids: set[int] = set()
        self._runq_hists: dict[int, RunqHistogram] = {}
        # Called with each new snapshot, in the sampler thread: work that depends only
        # on the pass (finding evaluation) is done once here, not on every scrape.
        self.after_pass: list[Callable[[Snapshot], object]] = []
        self.cpu_cores = float(os.cpu_count() or 1)
        self.memory_bytes = 0

    # -- public -----------------------------------------------------------------

    def snapshot(self) -> Snapshot | None:
        """The latest complete pass (None before the first one finishes)."""
        with self._lock:
            return self._snapshot

    def window(self) -> Window:
        """The last ``window_minutes`` complete minutes, for the finding evaluator."""
        with self._lock:
            w = Window(minutes=self.window_minutes)
            for cid, cw in self._windows.items():
                w.containers[cid] = ContainerWindow(
                    identity=cw.identity,
                    cgroup_id=cw.cgroup_id,
                    cpu_limit_cores=cw.cpu_limit_cores,
                    memory_limit_bytes=cw.memory_limit_bytes,
                    folds=deque(cw.folds),
                    first_seen=cw.first_seen,
                )
            w.node = deque(self._node_folds)
            w.node_cpu_cores = self.cpu_cores
            w.node_memory_bytes = self.memory_bytes
            w.others = dict(self._others)
            w.probe_loaded = self.probe is not None and self.probe.loaded
            return w

    def blame_in_progress(self) -> dict[int, dict[CulpritKey, float]]:
        """Each tracked cgroup's blame (wait seconds per culprit) in the minute that is
        not complete yet. The exported blame share adds it to the window's complete
        minutes, so a young victim's blame exists as soon as its stall does."""
        return {cid: dict(f.blame_s) for cid, f in list(self._current.items()) if f.blame_s}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception as e:  # a bug must not kill the exporter: log and go on
                log.error("sampler pass failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, self.interval - elapsed))

    # -- one pass ---------------------------------------------------------------

    def run_once(self, now: float | None = None) -> Snapshot:
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        minute = int(now // 60) * 60
        collectors: dict[str, CollectorStatus] = {}

        t = time.perf_counter()
        node, ok = self._read_node()
        collectors["node"] = CollectorStatus(ok, time.perf_counter() - t)

        t = time.perf_counter()
        containers, ok = self._read_cgroups(now, minute)
        collectors["cgroups"] = CollectorStatus(ok, time.perf_counter() - t)

        probe_snapshot = None
        if self.probe is not None:
            t = time.perf_counter()
            try:
                probe_snapshot = self._poll_probe(containers, now, minute)
                ok = True
            except Exception as e:
                log.warning("scheduler probe read failed: %s", e)
                ok = False
            collectors["probe"] = CollectorStatus(ok, time.perf_counter() - t)

        self._fold_node(node, now, minute)
        snap = Snapshot(
            taken_at=now,
            pass_duration_s=time.perf_counter() - t0,
            facts=self.facts,
            containers=tuple(containers),
            node=node,
            skipped_total=dict(self._skipped),
            collectors=collectors,
            identity_staleness_s=self.resolver.staleness_seconds(),
            passes_total=self._passes + 1,
            probe=probe_snapshot,
        )
        with self._lock:
            self._passes += 1
            self._snapshot = snap
        for hook in self.after_pass:
            try:
                hook(snap)
            except Exception as e:  # a broken consumer must not stop sampling
                log.error("after-pass hook failed: %s", e)
        return snap

    def _poll_probe(
        self, containers: list[ContainerSample], now: float, minute: int
    ) -> ProbeSnapshot:
        """Fold the probe's deltas since the last pass into the current minute.

        Victims are the tracked cgroups and their sub-cgroups; both sides of the blame
        matrix are mapped to the tracked owner, so a task in ``unit.service/sub`` is
        counted as (and blamed on) ``unit.service``. Self-wait is kept: it is evidence.
        """
        from .probe import RUNQ_SLOTS, RunqHistogram

        probe = self.probe
        assert probe is not None
        live = {c.cgroup_id for c in containers}
        owned = self._owned
        if probe.loaded:
            probe.set_tracked(live | {d for d, o in owned.items() if o in live})
        delta = probe.poll()

        def own(key: int) -> int:
            return owned.get(key, key)

        current = self._current
        for cid in live:
            fold = current.get(cid)
            if fold is not None and probe.loaded and fold.runq_buckets is None:
                # Loaded but no waits yet is "zero", not "not measured".
                fold.runq_buckets = [0] * RUNQ_SLOTS
                fold.runq_sum_s = 0.0
                fold.blame_s = {}
        for vid, rd in delta.runq.items():
            fold = current.get(own(vid))
            if fold is None:
                continue
            buckets = fold.runq_buckets
            if buckets is None:
                buckets = fold.runq_buckets = [0] * len(rd.counts)
            for i, n in enumerate(rd.counts):
                buckets[i] += n
            fold.runq_sum_s = (fold.runq_sum_s or 0.0) + rd.sum_s
        for vid, row in delta.blame.items():
            fold = current.get(own(vid))
            if fold is None:
                continue
            blame = fold.blame_s if fold.blame_s is not None else {}
            fold.blame_s = blame
            for key, cell in row.items():
                k = own(key) if isinstance(key, int) else key
                blame[k] = blame.get(k, 0.0) + cell.wait_s
        if probe.loaded and self._passes % 12 == 0:
            probe.prune(self._all_ids)
        # Cumulative histograms per tracked owner, summed from deltas here (not from the
        # probe's per-key totals, which drop a dead sub-cgroup's history and would make
        # the owner's counter go backwards).
        hists = self._runq_hists
        for vid, rd in delta.runq.items():
            owner = own(vid)
            if owner not in live:
                continue
            hist = hists.get(owner)
            if hist is None:
                hist = hists[owner] = RunqHistogram()
            hist.add(rd)
        for gone in [cid for cid in hists if cid not in live]:
            del hists[gone]
        runq = {cid: h.copy() for cid, h in hists.items()}
        return ProbeSnapshot(status=probe.status, totals=probe.totals(), runq=runq)

    def _read_node(self) -> tuple[NodeSample, bool]:
        ok = True
        proc_stat = None
        pressures: dict[str, Pressure | None] = {}
        try:
            text = read_text(os.path.join(self.procfs, "stat"))
            if text is not None:
                proc_stat = parsers.parse_proc_stat(text, os.path.join(self.procfs, "stat"))
        except (OSError, CgroupParseError) as e:
            ok = False
            self._warn_once("node", f"cannot read /proc/stat: {e}")
        for res in ("cpu", "memory", "io"):
            path = os.path.join(self.procfs, "pressure", res)
            try:
                text = read_text(path)
                pressures[res] = parsers.parse_pressure(text, path) if text is not None else None
            except CgroupParseError as e:
                ok = False
                pressures[res] = None
                self._warn_once("node", str(e))
            except OSError:
                pressures[res] = None  # PSI disabled: reported in node facts
        if not self.memory_bytes:
            try:
                text = read_text(os.path.join(self.procfs, "meminfo"))
                if text is not None:
                    self.memory_bytes = parsers.parse_meminfo_total(text)
            except (OSError, CgroupParseError) as e:
                self._warn_once("node", f"cannot read meminfo: {e}")
        if proc_stat is not None and proc_stat.cpus:
            self.cpu_cores = float(proc_stat.cpus)
        return (
            NodeSample(
                proc_stat=proc_stat,
                cpu_pressure=pressures.get("cpu"),
                memory_pressure=pressures.get("memory"),
                io_pressure=pressures.get("io"),
                cpu_cores=self.cpu_cores,
                memory_bytes=self.memory_bytes,
            ),
            ok,
        )

    def _classify(self, path: str) -> tuple[CgroupKind, K8sCgroup | None]:
        hit = self._classify_cache.get(path)
        if hit is None:
            hit = self._classify_cache[path] = classify(path)
        return hit

    def _read_cgroups(self, now: float, minute: int) -> tuple[list[ContainerSample], bool]:
        if self.reader is None or self.facts.v2_root is None:
            return [], not self.facts.supported and self.facts.v2_root is None
        refresh = getattr(self.resolver, "refresh", None)
        if refresh is not None:  # e.g. re-read a metadata file once per pass
            refresh()
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
            sample = self._read_one(ref, ident, now, minute)
            if sample is not None:
                out.append(sample)
                seen.add(ref.id)
        # Forget cgroups that are gone: their series vanish with the next scrape.
        for gone in set(self._prev) - seen:
            self._prev.pop(gone, None)
            self._windows.pop(gone, None)
            self._current.pop(gone, None)
        if len(self._classify_cache) > 4 * (len(seen) + 64):
            self._classify_cache.clear()
        self._owned, self._all_ids = owned, all_ids
        with self._lock:
            self._others = others
        return out, True

    def _warn_once(self, path: str, msg: str) -> None:
        key = (path, msg)
        if key not in self._warned:
            if len(self._warned) > 10000:
                self._warned.clear()
            self._warned.add(key)
            log.warning("%s", msg)

    def _read_one(
        self, ref: CgroupRef, ident: Identity, now: float, minute: int
    ) -> ContainerSample | None:
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

        cpu_limit = r.cpu_max.limit_cores if r.cpu_max is not None else None
        if cpu_limit is None:
            cpu_limit = ident.cpu_limit_cores
        if cpu_limit is not None:
            cpu_ent = Entitlement(cpu_limit, "limit")
        elif ident.cpu_request_cores:
            cpu_ent = Entitlement(ident.cpu_request_cores, "request")
        else:
            cpu_ent = Entitlement(self.cpu_cores, "node")
        mem_limit = r.memory_max if r.memory_max is not None else ident.memory_limit_bytes
        if mem_limit is not None:
            mem_ent = Entitlement(float(mem_limit), "limit")
        elif ident.memory_request_bytes:
            mem_ent = Entitlement(float(ident.memory_request_bytes), "request")
        else:
            mem_ent = Entitlement(float(self.memory_bytes), "node")
        working_set = None
        if r.memory_current is not None:
            inactive = r.memory_stat.inactive_file if r.memory_stat is not None else 0
            working_set = max(0, r.memory_current - inactive)

        sample = ContainerSample(
            cgroup_id=ref.id,
            identity=ident,
            reading=r,
            cpu_limit_cores=cpu_limit,
            cpu_entitlement=cpu_ent,
            memory_limit_bytes=mem_limit,
            memory_entitlement=mem_ent,
            periods=periods,
            throttled_periods=throttled,
            throttled_usec=throttled_us,
            working_set_bytes=working_set,
        )
        self._fold(sample, now, minute)
        return sample

    # -- window -------------------------------------------------------------------

    def _fold(self, s: ContainerSample, now: float, minute: int) -> None:
        prev_entry = self._prev.get(s.cgroup_id)
        self._prev[s.cgroup_id] = (now, s)
        cw = self._windows.get(s.cgroup_id)
        if cw is None:
            cw = self._windows[s.cgroup_id] = ContainerWindow(
                identity=s.identity,
                cgroup_id=s.cgroup_id,
                cpu_limit_cores=s.cpu_limit_cores,
                memory_limit_bytes=s.memory_limit_bytes,
                folds=deque(maxlen=self.window_minutes),
                first_seen=now,
            )
        else:
            cw.identity = s.identity
            cw.cpu_limit_cores = s.cpu_limit_cores
            cw.memory_limit_bytes = s.memory_limit_bytes
        fold = self._current.get(s.cgroup_id)
        if fold is not None and fold.minute != minute:
            cw.folds.append(fold)  # that minute is complete
            fold = None
        if fold is None:
            fold = self._current[s.cgroup_id] = MinuteFold(minute=minute)
        r = s.reading
        fold.memory_bytes = r.memory_current
        fold.working_set_bytes = s.working_set_bytes
        if prev_entry is None:
            return  # first sight: a baseline, no deltas yet
        at, p = prev_entry
        pr = p.reading
        fold.seconds += now - at
        s.sampled_s = p.sampled_s + max(0.0, now - at)  # a counter: never backwards
        if r.cpu_stat is not None and pr.cpu_stat is not None:
            fold.cpu_usage_s += (_delta(r.cpu_stat.usage_usec, pr.cpu_stat.usage_usec) or 0) / 1e6
        fold.periods = _addi(fold.periods, _delta(s.periods, p.periods))
        fold.throttled_periods = _addi(
            fold.throttled_periods, _delta(s.throttled_periods, p.throttled_periods)
        )
        d = _delta(s.throttled_usec, p.throttled_usec)
        if d is not None:
            fold.throttled_s = (fold.throttled_s or 0.0) + d / 1e6
        cp, pcp = r.cpu_pressure, pr.cpu_pressure
        if cp is not None and pcp is not None:
            fold.cpu_some_s = (fold.cpu_some_s or 0.0) + _psi_delta_s(cp.some, pcp.some)
            if cp.full is not None and pcp.full is not None:
                fold.cpu_full_s = (fold.cpu_full_s or 0.0) + _psi_delta_s(cp.full, pcp.full)
        mp, pmp = r.memory_pressure, pr.memory_pressure
        if mp is not None and pmp is not None:
            fold.mem_some_s = (fold.mem_some_s or 0.0) + _psi_delta_s(mp.some, pmp.some)
            if mp.full is not None and pmp.full is not None:
                fold.mem_full_s = (fold.mem_full_s or 0.0) + _psi_delta_s(mp.full, pmp.full)
        ms, pms = r.memory_stat, pr.memory_stat
        if ms is not None and pms is not None:
            fold.refaults += _delta(ms.refaults, pms.refaults) or 0
            fold.pgmajfault += _delta(ms.pgmajfault, pms.pgmajfault) or 0
        me, pme = r.memory_events, pr.memory_events
        if me is not None and pme is not None:
            ev = fold.mem_events
            for k, v, pv in (
                ("high", me.high, pme.high),
                ("max", me.max, pme.max),
                ("oom", me.oom, pme.oom),
                ("oom_kill", me.oom_kill, pme.oom_kill),
            ):
                ev[k] = ev.get(k, 0) + (v - pv if v >= pv else 0)

    def _fold_node(self, node: NodeSample, now: float, minute: int) -> None:
        cur: dict[str, int] = {}
        if node.proc_stat is not None:
            cur["ctxt"] = node.proc_stat.ctxt
            cur["steal"] = node.proc_stat.steal_ticks
        for res, pr in (
            ("cpu", node.cpu_pressure),
            ("mem", node.memory_pressure),
            ("io", node.io_pressure),
        ):
            if pr is not None:
                cur[f"{res}_some"] = pr.some.total_usec
                if pr.full is not None:
                    cur[f"{res}_full"] = pr.full.total_usec
        prev, prev_at = self._node_prev, self._node_prev_at
        self._node_prev, self._node_prev_at = cur, now
        fold = self._node_current
        if fold is not None and fold.minute != minute:
            self._node_folds.append(fold)
            fold = None
        if fold is None:
            fold = self._node_current = NodeFold(minute=minute)
        if prev_at is None:
            return
        fold.seconds += now - prev_at

        def d(key: str) -> int | None:
            return _delta(cur.get(key), prev.get(key))

        fold.context_switches += d("ctxt") or 0
        fold.steal_s += (d("steal") or 0) / USER_HZ
        for key, attr in (
            ("cpu_some", "cpu_some_s"),
            ("cpu_full", "cpu_full_s"),
            ("mem_some", "mem_some_s"),
            ("mem_full", "mem_full_s"),
            ("io_some", "io_some_s"),
        ):
            v = d(key)
            if v is not None:
                setattr(fold, attr, _add(getattr(fold, attr), v / 1e6))
