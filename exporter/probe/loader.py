"""Load the BCC scheduler probe (``bpf/sched_probe.c``) and read its maps.

Usage (one sampler thread; ``close()`` may come from anywhere)::

    probe = SchedProbe(attribution="occupancy")
    status = probe.load()            # never raises; status.reason says why not
    probe.set_tracked(victim_ids)    # every pass
    delta = probe.poll()             # deltas since the previous poll
    probe.prune(live_ids)            # forget dead cgroups
    probe.close()

Kernel maps are never cleared: each poll reads them whole (batch lookups) and diffs
against the previous read in userspace. All knobs reach the C code as ``-D`` cflags.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..window.model import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED, CulpritKey
from .diff import diff_counters, diff_totals
from .histogram import RUNQ_BOUNDS_S, bounds_ns
from .model import BlameCell, ProbeDelta, ProbeTotals, ProgramStats, RunqHistogram, runq_delta
from .status import (
    REASON_ATTACH_ERROR,
    REASON_COMPILE_ERROR,
    REASON_DISABLED,
    REASON_NO_BCC,
    REASON_NO_HEADERS,
    REASON_NO_TRACEFS,
    REASON_NOT_LOADED,
    REASON_NOT_ROOT,
    ProbeStatus,
    find_kernel_source,
    has_bpf_privilege,
    tracefs_ok,
)

log = logging.getLogger(__name__)

ATTRIBUTIONS = ("occupancy", "last-runner")
SOURCE_FILE = "sched_probe.c"

# Special culprit keys in the kernel (see bpf/sched_probe.h).
IDLE_KEY = 0
UNATTRIBUTED_KEY = (1 << 64) - 1

# Mirrors enum stat_index in bpf/sched_probe.h.
STAT_NAMES = (
    "switches",
    "enqueues",
    "runq_events",
    "blame_events",
    "fail_pids",
    "fail_start",
    "fail_runq",
    "fail_blame",
    "pids_inserted",
    "pids_deleted",
    "start_inserted",
    "start_deleted",
    "unknown_pid",
    "ring_short",
)
_S = {name: i for i, name in enumerate(STAT_NAMES)}

# Map names as exported (contention_probe_map_*{map=...}).
MAP_TRACKED = "tracked"
MAP_PIDS = "pid_cgroup"
MAP_ENQUEUED = "enqueued_at"
MAP_RUNQ = "runq"
MAP_BLAME = "blame"
MAPS = (MAP_TRACKED, MAP_PIDS, MAP_ENQUEUED, MAP_RUNQ, MAP_BLAME)

PROGRAMS = {
    "sched_switch": b"tracepoint__sched__sched_switch",
    "sched_wakeup": b"tracepoint__sched__sched_wakeup",
    "sched_wakeup_new": b"tracepoint__sched__sched_wakeup_new",
    "sched_process_exit": b"tracepoint__sched__sched_process_exit",
}


def find_bpf_dir() -> Path | None:
    """The directory holding ``sched_probe.c``: packaged (``exporter/bpf``) or the repo's."""
    here = Path(__file__).resolve()
    env = os.environ.get("CONTENTION_BPF_DIR")
    candidates = [Path(env)] if env else []
    candidates += [here.parents[1] / "bpf", here.parents[2] / "bpf"]
    for c in candidates:
        if (c / SOURCE_FILE).is_file():
            return c
    return None


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


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Capture fd 2 (where clang and the verifier write) into a list of lines."""
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.extend(tmp.read().decode(errors="replace").splitlines())


def _error_lines(lines: list[str], limit: int = 6) -> str:
    keep = [
        ln.strip()
        for ln in lines
        if "error" in ln.lower() or "invalid" in ln.lower() or "too complex" in ln.lower()
    ]
    return " | ".join(keep[-limit:])


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
        ring_slots: int = 32,
        enabled: bool = True,
        tracefs: str = "/sys/kernel/tracing",
        procfs: str = "/proc",
        bpf_dir: str | None = None,
        bounds_s: tuple[float, ...] = RUNQ_BOUNDS_S,
    ) -> None:
        if attribution not in ATTRIBUTIONS:
            raise ValueError(f"attribution must be one of {ATTRIBUTIONS}, not {attribution!r}")
        if min_wait_us < 0:
            raise ValueError("min_wait_us must be >= 0")
        if ring_slots < 2 or ring_slots & (ring_slots - 1):
            raise ValueError("ring_slots must be a power of two >= 2")
        for name, v in (("max_cgroups", max_cgroups), ("max_pids", max_pids)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1")
        if max_blame < 1:
            raise ValueError("max_blame must be >= 1")
        self.attribution = attribution
        self.min_wait_us = min_wait_us
        self.kernel_source = kernel_source
        self.max_cgroups = max_cgroups
        self.max_pids = max_pids
        self.max_blame = max_blame
        self.ring_slots = ring_slots
        self.enabled = enabled
        self.tracefs = tracefs
        self.procfs = procfs
        self.bpf_dir = bpf_dir
        self.bounds_s = tuple(bounds_s)
        self._bounds_ns = bounds_ns(self.bounds_s)
        self._lock = threading.Lock()
        self._bpf: Any = None
        self._status = ProbeStatus(False, REASON_NOT_LOADED, "load() not called", attribution)
        self._tracked: set[int] = set()
        self._prev_runq: dict[int, tuple[int, ...]] = {}
        self._prev_blame: dict[tuple[int, int], tuple[int, ...]] = {}
        self._prev_stats: tuple[int, ...] | None = None
        self._last_poll = 0.0
        self._user_failures: dict[str, int] = dict.fromkeys(MAPS, 0)
        self._totals = ProbeTotals()
        self._runq_totals: dict[int, RunqHistogram] = {}
        self._batch_ok = True

    # ----------------------------------------------------------------- loading

    @property
    def status(self) -> ProbeStatus:
        return self._status

    @property
    def loaded(self) -> bool:
        return self._bpf is not None

    def capacities(self) -> dict[str, int]:
        # Pid state is one entry per pid, shared by "pid_cgroup" and "enqueued_at":
        # max_pids directly indexed slots (pids below max_pids) + a hash of max_pids.
        pid_slots = 2 * self.max_pids
        return {
            MAP_TRACKED: self.max_cgroups,
            MAP_PIDS: pid_slots,
            MAP_ENQUEUED: pid_slots,
            MAP_RUNQ: self.max_cgroups,
            MAP_BLAME: self.max_blame,
        }

    def cflags(self, bpf_dir: Path) -> list[str]:
        """The ``-D`` knobs for the C code (the only place they are set)."""
        return [
            "-w",  # kernel-header warnings are noise here; errors still show
            f"-I{bpf_dir}",
            f"-DRUNQ_NBOUNDS={len(self._bounds_ns)}",
            "-DRUNQ_BOUNDS_NS=" + ",".join(f"{b}ULL" for b in self._bounds_ns),
            f"-DATTR_OCCUPANCY={1 if self.attribution == 'occupancy' else 0}",
            f"-DMIN_WAIT_NS={round(self.min_wait_us * 1000)}ULL",
            f"-DRING_SLOTS={self.ring_slots}",
            f"-DMAX_CGROUPS={self.max_cgroups}",
            f"-DMAX_PIDS={self.max_pids}",
            f"-DMAX_BLAME={self.max_blame}",
        ]

    def _fail(self, reason: str, detail: str) -> ProbeStatus:
        self._status = ProbeStatus(False, reason, detail, self.attribution)
        # Switched off on purpose (--no-probe) is news, not a problem.
        level = logging.INFO if reason == REASON_DISABLED else logging.WARNING
        log.log(level, "scheduler probe not loaded (%s): %s", reason, detail)
        return self._status

    def load(self) -> ProbeStatus:
        """Compile, load and attach. Never raises: the status says why not.

        Takes about a second. While clang runs, file descriptor 2 is redirected to
        capture compiler and verifier messages (logged at debug level, summarised in
        the status detail): call it at start-up, before other threads write to stderr.
        """
        with self._lock:
            if self._bpf is not None:
                return self._status
            try:
                return self._load()
            except Exception as e:  # a probe must never take the exporter down
                return self._fail(REASON_COMPILE_ERROR, f"unexpected: {e!r}")

    def _load(self) -> ProbeStatus:  # noqa: C901 - one check per reason, in the order to fix them
        if not self.enabled:
            return self._fail(REASON_DISABLED, "the scheduler probe is disabled by configuration")
        if not has_bpf_privilege(self.procfs):
            return self._fail(
                REASON_NOT_ROOT, "needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs"
            )
        ok, why = tracefs_ok(self.tracefs)
        if not ok:
            return self._fail(REASON_NO_TRACEFS, why)
        src_dir = Path(self.bpf_dir) if self.bpf_dir else find_bpf_dir()
        if src_dir is None or not (src_dir / SOURCE_FILE).is_file():
            return self._fail(REASON_COMPILE_ERROR, f"{SOURCE_FILE} not found (bpf/ directory)")
        ksrc, why = find_kernel_source(self.kernel_source)
        if ksrc is None and why:
            return self._fail(REASON_NO_HEADERS, why)
        try:
            from bcc import BPF
        except Exception as e:
            return self._fail(
                REASON_NO_BCC, f"cannot import bcc ({e}); install python3-bpfcc and link it"
            )
        if ksrc is not None:
            os.environ["BCC_KERNEL_SOURCE"] = ksrc
        src = str((src_dir / SOURCE_FILE).resolve())  # absolute: BCC resolves against cwd
        started = time.monotonic()
        lines: list[str] = []
        try:
            with _captured_stderr() as lines:
                bpf = BPF(src_file=src.encode(), cflags=self.cflags(src_dir))
        except Exception as e:
            msg = str(e)
            for ln in lines:
                log.debug("bcc: %s", ln)
            detail = _error_lines(lines)
            if "attach" in msg.lower():
                return self._fail(REASON_ATTACH_ERROR, f"{msg} {detail}".strip())
            if "failed to load" in msg.lower():
                msg = f"verifier rejected the program: {msg}"
            return self._fail(REASON_COMPILE_ERROR, f"{msg} {detail}".strip())
        for ln in lines:
            log.debug("bcc: %s", ln)
        self._bpf = bpf
        self._last_poll = time.monotonic()
        self._totals.map_capacity = self.capacities()
        if self._tracked:  # set_tracked() before load(): push the set now
            wanted, self._tracked = self._tracked, set()
            self._apply_tracked(wanted)
        self._status = ProbeStatus(
            True,
            "",
            f"attached to sched tracepoints in {time.monotonic() - started:.1f}s "
            f"(headers: {ksrc or 'bcc default'})",
            self.attribution,
        )
        log.info("scheduler probe loaded: %s", self._status.detail)
        return self._status

    def close(self) -> None:
        """Detach and free the maps (idempotent)."""
        with self._lock:
            bpf, self._bpf = self._bpf, None
            if bpf is not None:
                bpf.cleanup()
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
            if self._bpf is None:
                self._tracked = wanted
                return
            self._apply_tracked(wanted)

    def _apply_tracked(self, wanted: set[int]) -> None:
        table = self._bpf[MAP_TRACKED.encode()]
        for cid in self._tracked - wanted:
            with contextlib.suppress(KeyError):
                del table[table.Key(cid)]
            self._tracked.discard(cid)
        one = table.Leaf(1)
        for cid in wanted - self._tracked:
            try:
                table[table.Key(cid)] = one
            except Exception:  # map full
                self._user_failures[MAP_TRACKED] += 1
                continue
            self._tracked.add(cid)

    @property
    def tracked(self) -> frozenset[int]:
        return frozenset(self._tracked)

    # ---------------------------------------------------------------- reading

    def _items(self, table: Any) -> Iterable[tuple[Any, Any]]:
        if self._batch_ok:
            try:
                return list(table.items_lookup_batch())
            except Exception as e:
                log.info("batch map lookup unavailable (%s); iterating keys", e)
                self._batch_ok = False
        return list(table.items())

    def _read_runq(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, tuple[int, ...]] = {}
        for k, v in self._items(self._bpf[MAP_RUNQ.encode()]):
            key = k if isinstance(k, int) else int(k.value)
            out[key] = (*v.slots, v.sum_ns)
        return out

    def _read_blame(self) -> dict[tuple[int, int], tuple[int, ...]]:
        return {
            (int(k.victim), int(k.culprit)): (int(v.wait_ns), int(v.events))
            for k, v in self._items(self._bpf[MAP_BLAME.encode()])
        }

    def _read_stats(self) -> tuple[int, ...]:
        per_cpu = self._bpf[b"cpu_states"][ct.c_int(0)]
        sums = [0] * len(STAT_NAMES)
        for cpu in per_cpu:
            for i in range(len(STAT_NAMES)):
                sums[i] += int(cpu.stats[i])
        return tuple(sums)

    def poll(self) -> ProbeDelta:
        """Deltas since the previous poll (empty when not loaded)."""
        with self._lock:
            now = time.monotonic()
            interval = now - self._last_poll if self._last_poll else 0.0
            self._last_poll = now
            if self._bpf is None:
                return ProbeDelta(interval_s=interval)
            runq = self._read_runq()
            blame = self._read_blame()
            stats = self._read_stats()
            d_runq = diff_counters(self._prev_runq, runq)
            d_blame = diff_counters(self._prev_blame, blame)
            d_stats = diff_totals(self._prev_stats, stats)
            self._prev_runq, self._prev_blame, self._prev_stats = runq, blame, stats

            delta = ProbeDelta(interval_s=interval)
            for victim, vals in d_runq.items():
                rd = runq_delta(vals)
                delta.runq[victim] = rd
                self._runq_totals.setdefault(victim, RunqHistogram()).add(rd)
            for (victim, raw), (wait_ns, events) in d_blame.items():
                row = delta.blame.setdefault(victim, {})
                row[culprit_key(raw)] = BlameCell(wait_ns / 1e9, events)
            delta.context_switches = d_stats[_S["switches"]]
            delta.enqueues = d_stats[_S["enqueues"]]
            delta.runq_events = d_stats[_S["runq_events"]]
            delta.blame_events = d_stats[_S["blame_events"]]
            delta.unknown_pid_wakeups = d_stats[_S["unknown_pid"]]
            delta.ring_short = d_stats[_S["ring_short"]]

            failures_total = {
                MAP_TRACKED: self._user_failures[MAP_TRACKED],
                MAP_PIDS: stats[_S["fail_pids"]],
                MAP_ENQUEUED: stats[_S["fail_start"]],
                MAP_RUNQ: stats[_S["fail_runq"]],
                MAP_BLAME: stats[_S["fail_blame"]],
            }
            prev_failures = self._totals.update_failures
            delta.update_failures = {
                m: max(0, n - prev_failures.get(m, 0)) for m, n in failures_total.items()
            }
            delta.map_entries = {
                MAP_TRACKED: len(self._tracked),
                MAP_PIDS: max(0, stats[_S["pids_inserted"]] - stats[_S["pids_deleted"]]),
                MAP_ENQUEUED: max(0, stats[_S["start_inserted"]] - stats[_S["start_deleted"]]),
                MAP_RUNQ: len(runq),
                MAP_BLAME: len(blame),
            }
            delta.map_capacity = self.capacities()

            t = self._totals
            t.context_switches = stats[_S["switches"]]
            t.runq_events = stats[_S["runq_events"]]
            t.blame_events = stats[_S["blame_events"]]
            t.update_failures = failures_total
            t.map_entries = dict(delta.map_entries)
            t.map_capacity = dict(delta.map_capacity)
            t.programs = self._program_stats()
            return delta

    def _program_stats(self) -> dict[str, ProgramStats]:
        out: dict[str, ProgramStats] = {}
        funcs = getattr(self._bpf, "funcs", {})
        for name, fname in PROGRAMS.items():
            fn = funcs.get(fname)
            if fn is not None:
                st = program_stats(fn.fd)
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
            if self._bpf is None:
                return 0
            if self._tracked - live:
                self._apply_tracked(self._tracked & live)
            runq = self._bpf[MAP_RUNQ.encode()]
            for victim in list(self._prev_runq):
                if victim not in live or victim not in self._tracked:
                    with contextlib.suppress(KeyError):
                        del runq[runq.Key(victim)]
                        removed += 1
                    self._prev_runq.pop(victim, None)
            blame = self._bpf[MAP_BLAME.encode()]
            for victim, raw in list(self._prev_blame):
                gone_culprit = raw not in live and raw not in (IDLE_KEY, UNATTRIBUTED_KEY, 1)
                if victim not in live or victim not in self._tracked or gone_culprit:
                    with contextlib.suppress(KeyError):
                        del blame[blame.Key(victim, raw)]
                        removed += 1
                    self._prev_blame.pop((victim, raw), None)
        return removed
