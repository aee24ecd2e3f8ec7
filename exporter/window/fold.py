"""Deltas into minutes: each pass's cumulative counters become per-minute folds.

A pass hands every tracked cgroup's counters (and the node's) to :class:`WindowFolds`,
which subtracts the previous pass's values and adds the difference to the fold of the
current wall-clock minute. A minute is *complete* once a pass lands in the next one;
the last ``minutes`` complete minutes are the :class:`~exporter.window.model.Window`
the finding evaluator reads. Pure arithmetic on plain data, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from ..cgroupfs.model import Pressure, PressureLine, ProcStat
from ..cgroupfs.procfs import USER_HZ
from ..identity import Identity
from .model import ContainerWindow, CulpritKey, MinuteFold, NodeFold, Window
from .plausible import STRIKES, CounterSample, counter_problem, sample_problem, span_s

__all__ = ["CounterSample", "ImplausibleSample", "WindowFolds", "counter_delta", "minute_of"]


class ImplausibleSample(ValueError):
    """A cgroup's counters moved in a way the kernel cannot produce (``plausible``):
    the sample is refused and the last good one stays the baseline."""


def counter_delta(cur: int | None, prev: int | None) -> int | None:
    """A counter's increase; None if unknown, 0 if it went backwards (a reset or a
    recreated cgroup: treat as a fresh baseline rather than a huge negative)."""
    if cur is None or prev is None:
        return None
    return cur - prev if cur >= prev else 0


def _psi_delta_s(cur: PressureLine, prev: PressureLine) -> float:
    return (cur.total_usec - prev.total_usec) / 1e6 if cur.total_usec >= prev.total_usec else 0.0


# The node's time counters: key -> (NodeFold attribute, counter units per second).
# No steal column (a kernel before 2.6.11) or no PSI leaves the attribute None.
_NODE_TIMES = {
    "steal": ("steal_s", USER_HZ),
    "cpu_some": ("cpu_some_s", 1e6),
    "cpu_full": ("cpu_full_s", 1e6),
    "mem_some": ("mem_some_s", 1e6),
    "mem_full": ("mem_full_s", 1e6),
    "io_some": ("io_some_s", 1e6),
}
_NODE_KEYS = frozenset(_NODE_TIMES)


def _node_counters(
    proc_stat: ProcStat | None, cpu: Pressure | None, memory: Pressure | None, io: Pressure | None
) -> dict[str, int]:
    """The node's counters as read this pass, by key (what is not read is absent)."""
    cur: dict[str, int] = {}
    if proc_stat is not None:
        cur["ctxt"] = proc_stat.ctxt
        if proc_stat.steal_ticks is not None:
            cur["steal"] = proc_stat.steal_ticks
    for res, pr in (("cpu", cpu), ("mem", memory), ("io", io)):
        if pr is not None:
            cur[f"{res}_some"] = pr.some.total_usec
            if pr.full is not None:
                cur[f"{res}_full"] = pr.full.total_usec
    return cur


def _add(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None else a + b


def _addi(a: int | None, b: int | None) -> int | None:
    if b is None:
        return a
    return b if a is None else a + b


def minute_of(now: float) -> int:
    """Epoch seconds of the start of ``now``'s wall-clock minute."""
    return int(now // 60) * 60


@dataclass(slots=True)
class _Seen:
    at: float
    sample: CounterSample
    watched_s: float
    strikes: int = 0  # consecutive samples refused against this baseline


@dataclass(slots=True)
class _NodeBase:
    at: float
    value: int


class WindowFolds:
    """The sampler's window state: per cgroup, the previous pass's counters, the minute
    in progress and the complete minutes; the same for the node."""

    def __init__(self, minutes: int) -> None:
        self.minutes = minutes
        self._seen: dict[int, _Seen] = {}
        self._windows: dict[int, ContainerWindow] = {}
        self._current: dict[int, MinuteFold] = {}
        self._departed: dict[int, ContainerWindow] = {}
        self._node_folds: deque[NodeFold] = deque(maxlen=minutes)
        self._node_current: NodeFold | None = None
        self._node_base: dict[str, _NodeBase] = {}
        self._node_prev_at: float | None = None
        # Node counters with a pass of the current minute they did not cover.
        self._node_gaps: set[str] = set()

    def set_minutes(self, minutes: int) -> None:
        """Keep ``minutes`` complete minutes (the newest, when there are more)."""
        self.minutes = minutes
        for cw in (*self._windows.values(), *self._departed.values()):
            cw.folds = _newest(cw.folds, minutes)
        self._node_folds = deque(self._node_folds, maxlen=minutes)

    # -- per cgroup -----------------------------------------------------------------

    def fold(
        self,
        cgroup_id: int,
        identity: Identity,
        cpu_limit_cores: float | None,
        memory_limit_bytes: int | None,
        s: CounterSample,
        now: float,
        cpus: float,
    ) -> float:
        """Fold one cgroup's pass into its current minute. Returns the wall-clock
        seconds the cgroup has been watched (a counter: it never goes backwards).

        Raises :class:`ImplausibleSample`, changing nothing but a strike count, when
        the counters cannot have moved so since the last good sample on a node with
        ``cpus`` CPUs (``exporter.window.plausible``)."""
        minute = minute_of(now)
        prev = self._seen.get(cgroup_id)
        # The baseline to take deltas from: None at first sight, or after a change
        # that held for STRIKES passes (what the kernel says now: no delta across it).
        base = prev
        if prev is not None:
            why = sample_problem(s, prev.sample, now - prev.at, cpus)
            if why is not None:
                prev.strikes += 1
                if prev.strikes < STRIKES:
                    raise ImplausibleSample(why)
                base = None
        watched_s = 0.0 if prev is None else prev.watched_s
        if base is not None:
            watched_s += max(0.0, now - base.at)
        self._seen[cgroup_id] = _Seen(now, s, watched_s)
        cw = self._windows.get(cgroup_id)
        if cw is None:
            self._departed.pop(cgroup_id, None)
            cw = self._windows[cgroup_id] = ContainerWindow(
                identity=identity,
                cgroup_id=cgroup_id,
                cpu_limit_cores=cpu_limit_cores,
                memory_limit_bytes=memory_limit_bytes,
                first_seen=now,
            )
        else:
            cw.identity = identity
            cw.cpu_limit_cores = cpu_limit_cores
            cw.memory_limit_bytes = memory_limit_bytes
        fold = self._current.get(cgroup_id)
        if fold is not None and fold.minute != minute:
            cw.folds = _newest((*cw.folds, fold), self.minutes)  # that minute is complete
            fold = None
        if fold is None:
            fold = self._current[cgroup_id] = MinuteFold(minute=minute)
        fold.memory_bytes = s.reading.memory_current
        fold.working_set_bytes = s.working_set_bytes
        if base is not None:  # first sight: a baseline, no deltas yet
            fold.seconds += now - base.at
            _add_deltas(fold, s, base.sample)
        return watched_s

    def forget(self, keep: set[int], now: float) -> None:
        """Drop every cgroup not in ``keep`` (gone: its series vanish with the pass). A
        workload member's minutes, the one in progress included, are kept as departed
        for as long as the window can reach them: a workload is judged at earlier minute
        boundaries with the members that ran then."""
        for gone in set(self._seen) - keep:
            self._seen.pop(gone, None)
            cw = self._windows.pop(gone, None)
            fold = self._current.pop(gone, None)
            if cw is None or not cw.identity.workload:
                continue
            if fold is not None:
                cw.folds = _newest((*cw.folds, fold), self.minutes)
            cw.gone_at = now
            self._departed[gone] = cw
        oldest = now - 60 * (self.minutes + 1)
        self._departed = {
            cid: cw
            for cid, cw in self._departed.items()
            if cw.gone_at is not None and cw.gone_at >= oldest and cid not in self._windows
        }

    def current(self) -> Mapping[int, MinuteFold]:
        """The minute in progress of each cgroup (the probe's fold writes into it)."""
        return self._current

    def blame_in_progress(self) -> dict[int, dict[CulpritKey, float]]:
        """Each cgroup's blame (wait seconds per culprit) in the minute that is not
        complete yet. The exported blame share adds it to the window's complete
        minutes, so a young victim's blame exists as soon as its stall does."""
        return {cid: dict(f.blame_s) for cid, f in self._current.items() if f.blame_s}

    # -- the node ---------------------------------------------------------------------

    def fold_node(
        self,
        proc_stat: ProcStat | None,
        cpu: Pressure | None,
        memory: Pressure | None,
        io: Pressure | None,
        now: float,
        cpus: float,
    ) -> list[str]:
        """Fold the node's counters into its current minute. Returns why a counter's
        change was refused (see ``exporter.window.plausible``): that counter folds
        nothing this pass and starts from a new baseline at the next one, and its
        current minute is unknown (None), never a smaller share of the minute."""
        minute = minute_of(now)
        cur = _node_counters(proc_stat, cpu, memory, io)
        prev_at = self._node_prev_at
        self._node_prev_at = now
        fold = self._node_current
        if fold is not None and fold.minute != minute:
            self._node_folds.append(fold)
            fold = None
        if fold is None:
            fold = self._node_current = NodeFold(minute=minute)
            self._node_gaps = set()
        deltas, problems = self._node_deltas(cur, now, prev_at, cpus)
        if prev_at is None:
            return problems
        fold.seconds += now - prev_at
        self._node_gaps |= _NODE_KEYS - deltas.keys()

        def d(key: str) -> int | None:
            return deltas.get(key)

        fold.context_switches += d("ctxt") or 0
        for key, (attr, per_s) in _NODE_TIMES.items():
            if key in self._node_gaps:  # refused, missing or new in this minute
                setattr(fold, attr, None)
                continue
            v = d(key)
            if v is not None:
                setattr(fold, attr, _add(getattr(fold, attr), v / per_s))
        return problems

    def _node_deltas(
        self, cur: dict[str, int], now: float, prev_at: float | None, cpus: float
    ) -> tuple[dict[str, int], list[str]]:
        """Each node counter's change since the last pass, where it is possible. A
        counter refused (or missing) in the last pass starts again from here."""
        span = span_s(now - prev_at) if prev_at is not None else 0.0
        most = {"ctxt": None, "steal": cpus * span * USER_HZ}
        deltas: dict[str, int] = {}
        problems: list[str] = []
        for key, value in cur.items():
            base = self._node_base.get(key)
            if base is None or base.at != prev_at:
                self._node_base[key] = _NodeBase(now, value)
                continue
            why = counter_problem(key, value, base.value, most.get(key, span * 1e6))
            if why is not None:
                problems.append(f"node counter refused: {why}")
                continue  # the baseline stays old: the next pass starts afresh
            deltas[key] = value - base.value
            self._node_base[key] = _NodeBase(now, value)
        for gone in self._node_base.keys() - cur.keys():
            del self._node_base[gone]
        return deltas, problems

    # -- the window -------------------------------------------------------------------

    def window(
        self,
        node_cpu_cores: float,
        node_memory_bytes: int,
        others: Mapping[int, Identity],
        probe_loaded: bool,
    ) -> Window:
        """A copy of the last ``minutes`` complete minutes, for the finding evaluator."""
        w = Window(minutes=self.minutes)
        for cid, cw in self._windows.items():
            w.containers[cid] = _copy(cw)
        for cid, cw in self._departed.items():
            w.departed[cid] = _copy(cw)
        w.node = deque(self._node_folds)
        w.node_cpu_cores = node_cpu_cores
        w.node_memory_bytes = node_memory_bytes
        w.others = dict(others)
        w.probe_loaded = probe_loaded
        return w


def _newest(folds: tuple[MinuteFold, ...], minutes: int) -> tuple[MinuteFold, ...]:
    """The last ``minutes`` of ``folds`` (a deque's ``maxlen``, for a tuple)."""
    return folds[len(folds) - minutes :] if len(folds) > minutes else folds


def _copy(cw: ContainerWindow) -> ContainerWindow:
    return ContainerWindow(
        identity=cw.identity,
        cgroup_id=cw.cgroup_id,
        cpu_limit_cores=cw.cpu_limit_cores,
        memory_limit_bytes=cw.memory_limit_bytes,
        folds=cw.folds,
        first_seen=cw.first_seen,
        gone_at=cw.gone_at,
    )


def _add_deltas(fold: MinuteFold, s: CounterSample, p: CounterSample) -> None:
    r, pr = s.reading, p.reading
    if r.cpu_stat is not None and pr.cpu_stat is not None:
        usage = counter_delta(r.cpu_stat.usage_usec, pr.cpu_stat.usage_usec) or 0
        fold.cpu_usage_s += usage / 1e6
    fold.periods = _addi(fold.periods, counter_delta(s.periods, p.periods))
    fold.throttled_periods = _addi(
        fold.throttled_periods, counter_delta(s.throttled_periods, p.throttled_periods)
    )
    d = counter_delta(s.throttled_usec, p.throttled_usec)
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
        fold.refaults += counter_delta(ms.refaults, pms.refaults) or 0
        fold.pgmajfault += counter_delta(ms.pgmajfault, pms.pgmajfault) or 0
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
