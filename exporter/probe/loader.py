"""The scheduler probe as the sampler sees it: load it (CO-RE first, BCC as the
fallback), hand it the victim set, read and diff its maps.

Usage (one sampler thread; ``close()`` may come from anywhere)::

    probe = SchedProbe(attribution="occupancy")
    status = probe.load()            # never raises; status.reason says why not
    probe.set_tracked(victim_ids)    # every pass
    delta = probe.poll()             # deltas since the previous poll
    probe.prune(live_ids)            # forget dead cgroups
    probe.close()

Kernel maps are never cleared: each poll reads them whole (batch lookups) and diffs
against the previous read in userspace. Which loader loaded it, and why another did
not, is in ``status`` (``select.py`` decides; ``core.py`` and ``bcc.py`` load).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from ..window.model import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED, CulpritKey
from .backend import ATTRIBUTIONS, ProbeKnobs, ProbeMaps
from .core import DEFAULT_BTF
from .decode import IDLE_KEY, STAT, STAT_NAMES, UNATTRIBUTED_KEY
from .diff import diff_counters, diff_totals
from .histogram import RUNQ_BOUNDS_S
from .model import BlameCell, ProbeDelta, ProbeTotals, ProgramStats, RunqHistogram, runq_delta
from .select import LOADER_CHOICES, LOADER_NAMES, LoaderInputs, load_maps
from .status import (
    REASON_DISABLED,
    REASON_NOT_LOADED,
    REASON_NOT_ROOT,
    ProbeStatus,
    has_bpf_privilege,
)

log = logging.getLogger(__name__)

__all__ = ["ATTRIBUTIONS", "STAT_NAMES", "UNATTRIBUTED_KEY", "SchedProbe", "culprit_key"]

# Map names as exported (contention_probe_map_*{map=...}).
MAP_TRACKED = "tracked"
MAP_PIDS = "pid_cgroup"
MAP_ENQUEUED = "enqueued_at"
MAP_RUNQ = "runq"
MAP_BLAME = "blame"
MAPS = (MAP_TRACKED, MAP_PIDS, MAP_ENQUEUED, MAP_RUNQ, MAP_BLAME)


def culprit_key(raw: int) -> CulpritKey:
    if raw == IDLE_KEY:
        return CULPRIT_IDLE
    if raw == UNATTRIBUTED_KEY:
        return CULPRIT_UNATTRIBUTED
    return raw


def program_stats(fd: int) -> ProgramStats | None:
    """run_time_ns / run_cnt of a loaded program (zero unless bpf_stats_enabled=1)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return ProgramStats(int(fields["run_time_ns"]), int(fields["run_cnt"]))
    except (OSError, KeyError, ValueError):
        return None


class SchedProbe:
    """The in-kernel run-queue latency histogram and victim -> culprit matrix."""

    def __init__(
        self,
        attribution: str = "occupancy",
        min_wait_us: float = 50.0,
        kernel_source: str | None = None,
        max_cgroups: int = 4096,
        max_pids: int = 65536,
        max_blame: int = 32768,
        ring_slots: int = 256,
        enabled: bool = True,
        tracefs: str = "/sys/kernel/tracing",
        procfs: str = "/proc",
        bpf_dir: str | None = None,
        bounds_s: tuple[float, ...] = RUNQ_BOUNDS_S,
        loader: str = "auto",
        btf_path: str = DEFAULT_BTF,
        libbpf_name: str | None = None,
        object_path: str | None = None,
        use_ktime: bool = False,
        burst: bool = True,
    ) -> None:
        if loader not in LOADER_CHOICES:
            raise ValueError(f"loader must be one of {LOADER_CHOICES}, not {loader!r}")
        self.knobs = ProbeKnobs(
            attribution=attribution,
            min_wait_us=min_wait_us,
            ring_slots=ring_slots,
            max_cgroups=max_cgroups,
            max_pids=max_pids,
            max_blame=max_blame,
            bounds_s=tuple(bounds_s),
            burst=burst,
        )
        self.inputs = LoaderInputs(
            btf_path=btf_path,
            libbpf_name=libbpf_name,
            object_path=Path(object_path) if object_path else None,
            kernel_source=kernel_source,
            tracefs=tracefs,
            bpf_dir=bpf_dir,
            use_ktime=use_ktime,
        )
        self.attribution = attribution
        self.loader = loader
        self.enabled = enabled
        self.procfs = procfs
        self._lock = threading.Lock()
        self._maps: ProbeMaps | None = None
        self._status = ProbeStatus(False, REASON_NOT_LOADED, "load() not called", attribution)
        self._tracked: set[int] = set()
        self._prev_runq: dict[int, tuple[int, ...]] = {}
        self._prev_blame: dict[tuple[int, int], tuple[int, ...]] = {}
        self._prev_stats: tuple[int, ...] | None = None
        self._untracked: set[int] = set()  # since the last poll: their histograms restart
        self._last_poll = 0.0
        self._user_failures: dict[str, int] = dict.fromkeys(MAPS, 0)
        self._totals = ProbeTotals()
        self._runq_totals: dict[int, RunqHistogram] = {}

    # ----------------------------------------------------------------- loading

    @property
    def status(self) -> ProbeStatus:
        return self._status

    @property
    def loaded(self) -> bool:
        return self._maps is not None

    def capacities(self) -> dict[str, int]:
        # Pid state is one entry per pid, shared by "pid_cgroup" and "enqueued_at":
        # max_pids directly indexed slots (pids below max_pids) + a hash of max_pids.
        k = self.knobs
        pid_slots = 2 * k.max_pids
        return {
            MAP_TRACKED: k.max_cgroups,
            MAP_PIDS: pid_slots,
            MAP_ENQUEUED: pid_slots,
            MAP_RUNQ: k.max_cgroups,
            MAP_BLAME: k.max_blame,
        }

    def _fail(self, reason: str, detail: str) -> ProbeStatus:
        self._status = ProbeStatus(False, reason, detail, self.attribution)
        # Switched off on purpose (--no-probe) is news, not a problem.
        level = logging.INFO if reason == REASON_DISABLED else logging.WARNING
        log.log(level, "scheduler probe not loaded (%s): %s", reason, detail)
        return self._status

    def load(self) -> ProbeStatus:
        """Load and attach, trying the loaders in order (``loader``). Never raises:
        the status says which loaded, or why none did; one log line says the same.

        The BCC fallback compiles for about a second and redirects file descriptor 2
        meanwhile: call it at start-up, before other threads write to stderr.
        """
        with self._lock:
            if self._maps is not None:
                return self._status
            if not self.enabled:
                return self._fail(
                    REASON_DISABLED, "the scheduler probe is disabled by configuration"
                )
            if not has_bpf_privilege(self.procfs):
                return self._fail(
                    REASON_NOT_ROOT,
                    "needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs",
                )
            started = time.monotonic()
            out = load_maps(self.knobs, self.loader, self.inputs)
            if out.maps is None:
                return self._fail(out.reason, out.summary())
            self._maps = out.maps
            self._last_poll = time.monotonic()
            self._totals.map_capacity = self.capacities()
            if self._tracked:  # set_tracked() before load(): push the set now
                wanted, self._tracked = self._tracked, set()
                self._apply_tracked(wanted)
            name = LOADER_NAMES[out.maps.loader]
            detail = f"{name} in {time.monotonic() - started:.2f}s ({out.summary()})"
            self._status = ProbeStatus(True, out.reason, detail, self.attribution, out.maps.loader)
            if out.reason:
                log.warning("scheduler probe loaded by the %s fallback: %s", name, detail)
            else:
                log.info("scheduler probe loaded: %s", detail)
            return self._status

    def close(self) -> None:
        """Detach and free the maps (idempotent)."""
        with self._lock:
            maps, self._maps = self._maps, None
            if maps is not None:
                maps.close()
                self._status = ProbeStatus(False, REASON_NOT_LOADED, "closed", self.attribution)

    def __enter__(self) -> SchedProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- victim set

    def set_tracked(self, ids: Iterable[int]) -> None:
        """The victim set: only these cgroups get histograms and blame rows."""
        wanted = {int(i) for i in ids}
        with self._lock:
            if self._maps is None:
                self._tracked = wanted
                return
            self._apply_tracked(wanted)

    def _apply_tracked(self, wanted: set[int]) -> None:
        assert self._maps is not None
        for cid in self._tracked - wanted:
            self._maps.untrack(cid)
            self._tracked.discard(cid)
            self._untracked.add(cid)
        for cid in wanted - self._tracked:
            try:
                self._maps.track(cid)
            except OSError:  # map full
                self._user_failures[MAP_TRACKED] += 1
                continue
            self._tracked.add(cid)

    @property
    def tracked(self) -> frozenset[int]:
        return frozenset(self._tracked)

    # ---------------------------------------------------------------- reading

    def poll(self) -> ProbeDelta:
        """Deltas since the previous poll (empty when not loaded)."""
        with self._lock:
            now = time.monotonic()
            interval = now - self._last_poll if self._last_poll else 0.0
            self._last_poll = now
            maps = self._maps
            if maps is None:
                return ProbeDelta(interval_s=interval)
            # Blame before histograms: a wait that ends between the two reads then shows
            # in the histogram first, so a victim's blamed wait never exceeds its
            # recorded wait in one poll.
            blame = maps.read_blame()
            runq = maps.read_runq()
            stats = maps.read_stats()
            # An untracked victim's histogram starts from zero if it is tracked again
            # (a new slot): never diff it against the old one.
            for cid in self._untracked:
                self._prev_runq.pop(cid, None)
            self._untracked.clear()
            d_runq = diff_counters(self._prev_runq, runq)
            d_blame = diff_counters(self._prev_blame, blame)
            d_stats = diff_totals(self._prev_stats, stats)
            self._prev_runq, self._prev_blame, self._prev_stats = runq, blame, stats

            delta = ProbeDelta(interval_s=interval, burst_measured=self.knobs.burst)
            for victim, vals in d_runq.items():
                rd = runq_delta(vals, len(self.knobs.bounds_s) + 1)
                delta.runq[victim] = rd
                self._runq_totals.setdefault(victim, RunqHistogram()).add(rd)
            for (victim, raw), (wait_ns, events) in d_blame.items():
                row = delta.blame.setdefault(victim, {})
                row[culprit_key(raw)] = BlameCell(wait_ns / 1e9, events)
            delta.context_switches = d_stats[STAT["switches"]]
            delta.enqueues = d_stats[STAT["enqueues"]]
            delta.runq_events = d_stats[STAT["runq_events"]]
            delta.blame_events = d_stats[STAT["blame_events"]]
            delta.unknown_pid_wakeups = d_stats[STAT["unknown_pid"]]
            delta.ring_short = d_stats[STAT["ring_short"]]
            delta.migrated_waits = d_stats[STAT["migrated"]]

            failures_total = {
                MAP_TRACKED: self._user_failures[MAP_TRACKED],
                MAP_PIDS: stats[STAT["fail_pids"]],
                MAP_ENQUEUED: stats[STAT["fail_start"]],
                MAP_RUNQ: stats[STAT["fail_runq"]],
                MAP_BLAME: stats[STAT["fail_blame"]],
            }
            prev_failures = self._totals.update_failures
            delta.update_failures = {
                m: max(0, n - prev_failures.get(m, 0)) for m, n in failures_total.items()
            }
            delta.map_entries = {
                MAP_TRACKED: len(self._tracked),
                MAP_PIDS: max(0, stats[STAT["pids_inserted"]] - stats[STAT["pids_deleted"]]),
                MAP_ENQUEUED: max(0, stats[STAT["start_inserted"]] - stats[STAT["start_deleted"]]),
                MAP_RUNQ: len(runq),
                MAP_BLAME: len(blame),
            }
            delta.map_capacity = self.capacities()

            t = self._totals
            t.context_switches = stats[STAT["switches"]]
            t.runq_events = stats[STAT["runq_events"]]
            t.blame_events = stats[STAT["blame_events"]]
            t.migrated_waits = stats[STAT["migrated"]]
            t.update_failures = failures_total
            t.map_entries = dict(delta.map_entries)
            t.map_capacity = dict(delta.map_capacity)
            t.programs = self._program_stats()
            return delta

    def _program_stats(self) -> dict[str, ProgramStats]:
        out: dict[str, ProgramStats] = {}
        if self._maps is None:
            return out
        for name, fd in self._maps.program_fds().items():
            st = program_stats(fd)
            if st is not None:
                out[name] = st
        return out

    def totals(self) -> ProbeTotals:
        """Cumulative node counters as of the last poll (a copy)."""
        with self._lock:
            return self._totals.copy()

    def runq_totals(self) -> dict[int, RunqHistogram]:
        """Cumulative per-victim histograms as of the last poll (copies)."""
        with self._lock:
            return {k: v.copy() for k, v in self._runq_totals.items()}

    # ---------------------------------------------------------------- pruning

    def prune(self, live_ids: Iterable[int]) -> int:
        """Delete entries of cgroups that no longer exist; returns entries removed.

        ``live_ids``: every cgroup id present in the cgroup2 tree now (tracked or
        not). Kernel entries of victims no longer tracked go too (if tracked again,
        they restart from a fresh baseline); the cumulative ``runq_totals()`` of a
        living cgroup are kept, so they stay monotonic. Call right after a poll:
        increments between that poll and the delete are lost (a dead cgroup's).
        """
        live = {int(i) for i in live_ids}
        removed = 0
        with self._lock:
            for cid in [c for c in self._runq_totals if c not in live]:
                del self._runq_totals[cid]
            maps = self._maps
            if maps is None:
                return 0
            if self._tracked - live:
                self._apply_tracked(self._tracked & live)
            for victim in list(self._prev_runq):
                if victim not in live or victim not in self._tracked:
                    removed += maps.delete_runq(victim)
                    self._prev_runq.pop(victim, None)
            for victim, raw in list(self._prev_blame):
                gone_culprit = raw not in live and raw not in (IDLE_KEY, UNATTRIBUTED_KEY, 1)
                if victim not in live or victim not in self._tracked or gone_culprit:
                    removed += maps.delete_blame(victim, raw)
                    self._prev_blame.pop((victim, raw), None)
        return removed
