"""The finding evaluator: seed 000's gating rules over the 5-minute window. No I/O.

Every decision is made from per-minute *fractions* (stall seconds / minute seconds),
which is exactly what ``rate(x_seconds_total[1m])`` gives in PromQL, and every
comparison is written in the same arithmetic order as the generated rules
(``exporter.rules.generator``), so the evaluator and Prometheus agree to the bit on
the scenario corpus (tests/scenarios). Seed 000 speaks of PSI ``avg10``; an
exponentially weighted 10-second average cannot be reproduced from counters in
PromQL, so both sides use the per-minute fraction instead (docs/findings.md).

Evaluated at ``now``, the *latest minute* is the last complete minute before ``now``'s
minute, the *sustain minutes* are the last ``sustainMinutes`` minutes, and the
*window* the last ``windowMinutes`` minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cgroupfs.discovery import CgroupKind
from ..identity import Identity
from ..probe.culprit import Culprit as ProbeCulprit
from ..probe.culprit import classify_culprit
from ..probe.histogram import RUNQ_BOUNDS_S
from ..probe.metrics import blame_shares as probe_blame_shares
from ..window import (
    ContainerWindow,
    CulpritKey,
    MinuteFold,
    NodeFold,
    Window,
)
from .model import (
    CULPRIT_SELF,
    NAMEABLE_CULPRIT_KINDS,
    REMEDIATION,
    Culprit,
    Finding,
    Kind,
    Severity,
    Victim,
    sort_findings,
)
from .thresholds import Thresholds

P99 = 0.99

# -- per-minute signals (each mirrors one PromQL term of the generated rules) -----------


def _frac(value_s: float | None, seconds: float) -> float | None:
    """rate(x_seconds_total[1m]) for one minute: stall seconds per second."""
    if value_s is None or seconds <= 0:
        return None
    return value_s / seconds


def _ge(x: float | None, th: float) -> bool:
    return x is not None and not math.isnan(x) and x >= th


@dataclass(frozen=True, slots=True)
class RunqMinute:
    events: int
    rate: float  # events per second
    le_fraction: dict[float, float | None]  # bound -> share of events at or below it
    overflow_rate: float
    p99_s: float | None  # histogram_quantile estimate (evidence only)

    def floor_ok(self, th: Thresholds) -> bool:
        # rate(_count[1m]) * 60 >= minRunqEvents  or  rate(+Inf) - rate(largest bound) > 0
        return self.rate * 60 >= th.min_runq_events or self.overflow_rate > 0

    def p99_at_least(self, bound_s: float) -> bool:
        # rate(le=bound) / rate(le=+Inf) <= 0.99  (histogram_quantile's rank test)
        f = self.le_fraction.get(bound_s)
        return f is not None and not math.isnan(f) and f <= P99


def _p99(buckets: list[int]) -> float | None:
    total = sum(buckets)
    if total == 0:
        return None
    rank = P99 * total
    running, lower = 0, 0.0
    for bound, c in zip(RUNQ_BOUNDS_S, buckets, strict=False):
        if running + c >= rank and c > 0:
            return lower + (bound - lower) * (rank - running) / c
        running += c
        lower = bound
    return float(RUNQ_BOUNDS_S[-1])


def runq_minute(f: MinuteFold, th: Thresholds) -> RunqMinute | None:
    b = f.runq_buckets
    if b is None or f.seconds <= 0:
        return None
    if len(b) != len(RUNQ_BOUNDS_S) + 1:
        raise ValueError(f"runq_buckets has {len(b)} slots, expected {len(RUNQ_BOUNDS_S) + 1}")
    s = f.seconds
    total = sum(b)
    rate = total / s
    fractions: dict[float, float | None] = {}
    for bound in {th.runq_bound_s, th.critical_runq_bound_s}:
        c = sum(b[: RUNQ_BOUNDS_S.index(bound) + 1])
        fractions[bound] = (c / s) / rate if total > 0 else None
    below_overflow = sum(b[:-1])
    return RunqMinute(
        events=total,
        rate=rate,
        le_fraction=fractions,
        overflow_rate=rate - below_overflow / s,
        p99_s=_p99(b),
    )


@dataclass(frozen=True, slots=True)
class CpuMinute:
    minute: int
    some: float | None
    full: float | None
    runq: RunqMinute | None
    throttled_ratio: float | None  # this minute only (evidence)

    def runq_slow(self, th: Thresholds, bound_s: float) -> bool:
        return self.runq is not None and self.runq.p99_at_least(bound_s) and self.runq.floor_ok(th)

    def psi_stalled(self, th: Thresholds) -> bool:
        return _ge(self.some, th.stall_some)

    def stalled(self, th: Thresholds) -> bool:
        return self.psi_stalled(th) or self.runq_slow(th, th.runq_bound_s)

    def critical(self, th: Thresholds) -> bool:
        return _ge(self.full, th.critical_cpu_full) or self.runq_slow(th, th.critical_runq_bound_s)

    def both(self, th: Thresholds) -> bool:
        return self.psi_stalled(th) and self.runq_slow(th, th.runq_bound_s)


def cpu_minute(f: MinuteFold, th: Thresholds) -> CpuMinute:
    tr = None
    if f.periods and f.throttled_periods is not None:
        tr = f.throttled_periods / f.periods
    return CpuMinute(
        minute=f.minute,
        some=_frac(f.cpu_some_s, f.seconds),
        full=_frac(f.cpu_full_s, f.seconds),
        runq=runq_minute(f, th),
        throttled_ratio=tr,
    )


def _mem_stalled(f: MinuteFold, th: Thresholds) -> bool:
    # rate(memory some[1m]) >= memStallSome  or  rate(refaults[1m]) >= refaultPerMin / 60
    if _ge(_frac(f.mem_some_s, f.seconds), th.mem_stall_some):
        return True
    return f.seconds > 0 and f.refaults / f.seconds >= th.refault_per_min / 60


def _limit_hits(f: MinuteFold) -> int:
    return f.mem_events.get("high", 0) + f.mem_events.get("max", 0)


def _node_pressure(n: NodeFold | None, th: Thresholds) -> bool:
    return n is not None and _ge(_frac(n.mem_some_s, n.seconds), th.node_mem_stall_some)


# -- window-level values ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Clock:
    """Which minutes count, evaluated at ``now``."""

    latest: int  # start of the latest complete minute
    window: tuple[int, ...]  # minute starts, oldest first
    sustain: tuple[int, ...]

    @classmethod
    def at(cls, now: float, th: Thresholds, window: Window | None = None) -> Clock:
        """The minutes that count at ``now``. With a ``window``: when the minute that
        just ended is not folded yet (``now`` is between the minute boundary and the
        sampler's next pass), the minute before it counts as the latest, so verdicts do
        not blink off for a few seconds every minute. Older data is stale: it counts
        for nothing."""
        current = int(now // 60) * 60
        if window is not None:
            newest = _newest_minute(window)
            if newest is not None and newest == current - 120:
                current -= 60
        return cls(
            latest=current - 60,
            window=tuple(current - 60 * k for k in range(th.window_minutes, 0, -1)),
            sustain=tuple(current - 60 * k for k in range(th.sustain_minutes, 0, -1)),
        )


def _newest_minute(window: Window) -> int | None:
    newest = [n.minute for n in window.node]
    newest += [cw.folds[-1].minute for cw in window.containers.values() if cw.folds]
    return max(newest, default=None)


# A container first seen this long after the start of the first sustain minute still
# counts as watched for it: the evaluator's fractions divide by the seconds actually
# watched, so 45 s of a minute is a whole enough minute (the rules' rate() over a fixed
# range has no such correction: they wait the full sustainMinutes, 0-15 s longer).
WATCH_GRACE_S = 15.0


def watched(cw: ContainerWindow, clock: Clock) -> bool:
    """Watched (nearly) since the start of the first sustain minute: only then is each
    sustain minute a (nearly) whole minute of data, and a container is never judged on
    its first seconds (young series: docs/findings.md). The rules test
    ``contention_sampled_seconds_total offset <sustainMinutes>m``: the same on whole
    minutes, as in the scenario corpus."""
    return cw.first_seen <= clock.sustain[0] + WATCH_GRACE_S


def _folds(cw: ContainerWindow, minutes: Iterable[int]) -> list[MinuteFold]:
    wanted = set(minutes)
    return [f for f in cw.folds if f.minute in wanted]


def throttle_totals(folds: list[MinuteFold], th: Thresholds) -> dict[str, Any] | None:
    """Throttled periods / periods over the window, as
    ``rate(throttled_periods[5m]) / rate(periods[5m])``."""
    have = [f for f in folds if f.periods is not None]
    if not have:
        return None
    thr = sum(f.throttled_periods or 0 for f in have)
    per = sum(f.periods or 0 for f in have)
    thr_s = sum(f.throttled_s or 0.0 for f in have)
    r = float(th.window_s)
    ratio = (thr / r) / (per / r) if per > 0 else None
    return {"ratio": ratio, "throttled_periods": thr, "periods": per, "throttled_seconds": thr_s}


def cpu_usage_cores(folds: list[MinuteFold], th: Thresholds) -> float | None:
    """Average cores used over the minutes of the window the cgroup was watched, as
    ``rate(usage[5m]) / rate(contention_sampled_seconds_total[5m])`` (same arithmetic
    order): a culprit younger than the window is not understated."""
    secs = sum(f.seconds for f in folds)
    if not folds or secs <= 0:
        return None
    r = float(th.window_s)
    return (sum(f.cpu_usage_s for f in folds) / r) / (secs / r)


@dataclass(frozen=True, slots=True)
class BlameShare:
    """One culprit's share of a victim's run-queue wait over the window."""

    key: CulpritKey  # a cgroup id, "idle" or "unattributed" (merged keys: the first)
    culprit_kind: str  # pod, system, kernel, idle, unknown, or self (the victim itself)
    ref: str  # the `culprit` label
    identity: Identity | None
    seconds: float
    share: float
    labels: dict[str, str]  # culprit_* labels, as on contention_blame_share


def identities(window: Window) -> dict[int, Identity]:
    """Every cgroup the window can name: tracked containers and ``others``."""
    out = dict(window.others)
    out.update({cid: cw.identity for cid, cw in window.containers.items()})
    return out


def window_blame(
    window: Window, cgroup_id: int, now: float, th: Thresholds, clock: Clock | None = None
) -> dict[CulpritKey, float]:
    """Wait seconds per culprit key over the window (the collector's ``blame_window_s``).

    ``clock``: ``Clock.at(now, th, window)`` when the caller has it (finding the newest
    minute looks at every container: once per pass, not once per container)."""
    cw = window.containers.get(cgroup_id)
    seconds: dict[CulpritKey, float] = {}
    if cw is None:
        return seconds
    if clock is None:
        clock = Clock.at(now, th, window)
    for f in _folds(cw, clock.window):
        for key, s in (f.blame_s or {}).items():
            seconds[key] = seconds.get(key, 0.0) + s
    return seconds


def blame_shares(
    window: Window,
    cgroup_id: int,
    now: float,
    th: Thresholds,
    clock: Clock | None = None,
    idents: Mapping[int, Identity] | None = None,
) -> list[BlameShare]:
    """Every culprit's share of the victim's wait over the window, largest first.

    Classification and shares are the probe's (``exporter.probe.metrics``), which is
    what ``contention_blame_share`` exports, so the rules and the evaluator test the
    same numbers. The victim's own cgroup is marked ``self`` here; the rules exclude it
    with a join on ``culprit_cgroup == cgroup``. Empty without probe data.
    """
    sums = window_blame(window, cgroup_id, now, th, clock)
    if idents is None:
        idents = identities(window)
    first_key: dict[ProbeCulprit, CulpritKey] = {}
    for key in sums:
        first_key.setdefault(classify_culprit(key, idents), key)
    out = []
    for b in probe_blame_shares(sums, idents, top_k=None):
        key = first_key[b.culprit]
        kind = str(b.culprit.kind)
        if key == cgroup_id:
            kind = CULPRIT_SELF
        ident = idents.get(key) if isinstance(key, int) else None
        if ident is None and b.culprit.kind == "kernel":
            ident = Identity(cgroup="/", kind=CgroupKind.ROOT)
        out.append(
            BlameShare(
                key=key,
                culprit_kind=kind,
                ref=b.culprit.culprit,
                identity=ident,
                seconds=b.wait_s,
                share=b.share,
                labels=b.culprit.labels(),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Overage:
    cgroup_id: int
    identity: Identity
    bytes: int
    share: float | None


def memory_overages(window: Window, now: float, th: Thresholds) -> list[Overage]:
    """Each tracked container's working set beyond its memory request (all of it when it
    has no request) in the latest minute, and its share of the node's total overage.
    The memory-pressure culprit heuristic (seed 000) ranks on this; largest first."""
    latest = Clock.at(now, th, window).latest
    rows: list[tuple[int, Identity, int]] = []
    for cid, cw in window.containers.items():
        fs = _folds(cw, (latest,))
        if not fs or fs[0].working_set_bytes is None:
            continue
        ws = fs[0].working_set_bytes
        req = cw.identity.memory_request_bytes
        over = max(ws - req, 0) if req is not None else ws
        rows.append((cid, cw.identity, over))
    total = sum(r[2] for r in rows)
    out = [Overage(cid, ident, b, (b / total) if total > 0 else None) for cid, ident, b in rows]
    out.sort(key=lambda o: (-(o.share or 0.0), o.identity.cgroup))
    return out


# -- the evaluator --------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.0f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.0f} ms"


def _run_start(present: Iterable[int], held: Callable[[int], bool], latest: int) -> int:
    """Start of the run of consecutive minutes ending at ``latest`` for which ``held``."""
    have = set(present)
    start, m = latest, latest
    while m in have and held(m):
        start = m
        m -= 60
    return start


def _cpu_severity(latest: CpuMinute | None, th: Thresholds) -> Severity:
    if latest is not None and latest.critical(th):
        return Severity.CRITICAL
    if latest is not None and latest.both(th):
        return Severity.WARNING
    return Severity.INFO


def _cpu_evidence(
    cms: dict[int, CpuMinute], clock: Clock, throttle: dict[str, Any] | None
) -> dict[str, Any]:
    sustain = [cms.get(m) for m in clock.sustain]
    latest = cms.get(clock.latest)
    ev: dict[str, Any] = {
        "cpu_pressure_some": [c.some if c else None for c in sustain],
        "cpu_pressure_full": latest.full if latest else None,
        "runq_p99_seconds": [c.runq.p99_s if c and c.runq else None for c in sustain],
        "runq_events": [c.runq.events if c and c.runq else None for c in sustain],
        "throttled_ratio": throttle["ratio"] if throttle else None,
        "throttled_periods": throttle["throttled_periods"] if throttle else None,
        "periods": throttle["periods"] if throttle else None,
        "throttled_seconds": throttle["throttled_seconds"] if throttle else None,
        "minutes": list(clock.sustain),
    }
    return ev


def evaluate(window: Window, thresholds: Thresholds, now: float) -> list[Finding]:
    """All findings for the window at ``now`` (epoch seconds), most severe first."""
    th = thresholds
    clock = Clock.at(now, th, window)
    idents = identities(window)  # who every cgroup id is: built once, not per victim
    last_seen = float(clock.latest + 60)
    node = {n.minute: n for n in window.node}
    findings: list[Finding] = []
    overages: list[Overage] | None = None

    for cid, cw in sorted(window.containers.items(), key=lambda kv: kv[1].identity.cgroup):
        if not watched(cw, clock):
            continue  # too young to judge (it can still be a culprit)
        victim = Victim(cid, cw.identity)
        vname = cw.identity.name
        wfolds = _folds(cw, clock.window)
        by_min = {f.minute: f for f in wfolds}
        cms = {m: cpu_minute(f, th) for m, f in by_min.items()}
        latest = cms.get(clock.latest)
        throttle = throttle_totals(wfolds, th)
        tratio = throttle["ratio"] if throttle else None

        # cpu-throttled: its own quota, never a culprit.
        if _ge(tratio, th.throttled_ratio):
            assert throttle is not None and tratio is not None
            thr_minutes = [f.minute for f in wfolds if (f.throttled_periods or 0) > 0]
            ev = _cpu_evidence(cms, clock, throttle)
            ev["cpu_limit_cores"] = cw.cpu_limit_cores
            findings.append(
                Finding(
                    kind=Kind.CPU_THROTTLED,
                    severity=_cpu_severity(latest, th),
                    victim=victim,
                    culprit=None,
                    evidence=ev,
                    first_seen=float(min(thr_minutes, default=clock.latest)),
                    last_seen=float(max(thr_minutes, default=clock.latest) + 60),
                    message=(
                        f"{vname} was throttled in {_pct(tratio)} of its CFS periods over "
                        f"{th.window_minutes}m ({throttle['throttled_seconds']:.1f} s throttled)"
                        f"; its own CPU limit ({cw.cpu_limit_cores or 'n/a'} cores) is the cause"
                    ),
                    remediation=REMEDIATION[Kind.CPU_THROTTLED],
                )
            )

        # CPU stall, sustained, and not self-throttled (the hard gate).
        sustained = all(m in cms and cms[m].stalled(th) for m in clock.sustain)
        if sustained and not _ge(tratio, th.throttled_ratio_max):
            findings.extend(
                _cpu_stall_findings(window, cw, cid, cms, clock, throttle, th, now, idents)
            )

        # Memory.
        sustain_folds = [by_min.get(m) for m in clock.sustain]
        if all(f is not None and _mem_stalled(f, th) for f in sustain_folds):
            pressure = [_node_pressure(node.get(m), th) for m in clock.sustain]
            lf = by_min[clock.latest]
            sev = (
                Severity.CRITICAL
                if _ge(_frac(lf.mem_full_s, lf.seconds), th.critical_mem_full)
                else Severity.WARNING
            )
            ev = _mem_evidence(cw, by_min, node, clock, wfolds)

            def same_state(
                m: int, b: dict[int, MinuteFold] = by_min, p: bool = pressure[-1]
            ) -> bool:
                return _mem_stalled(b[m], th) and _node_pressure(node.get(m), th) == p

            first = float(_run_start(list(by_min), same_state, clock.latest))
            if all(pressure):
                if overages is None:
                    overages = memory_overages(window, now, th)
                findings.append(
                    _memory_pressure(
                        window, clock, cw, victim, overages, ev, sev, first, th, idents
                    )
                )
            elif not any(pressure) and all(_limit_hits(f) > 0 for f in sustain_folds if f):
                findings.append(
                    Finding(
                        kind=Kind.MEMORY_LIMIT_THRASH,
                        severity=sev,
                        victim=victim,
                        culprit=None,
                        evidence=ev,
                        first_seen=first,
                        last_seen=last_seen,
                        message=(
                            f"{vname} is stalled on memory (some "
                            f"{_pct(ev['memory_pressure_some'][-1])}, "
                            f"{ev['refaults_per_minute'][-1]:.0f} refaults/min) while hitting "
                            f"its own memory limit ({ev['limit_hits'][-1]} high+max events "
                            "in the latest minute); the node is not under memory pressure"
                        ),
                        remediation=REMEDIATION[Kind.MEMORY_LIMIT_THRASH],
                    )
                )
    return sort_findings(findings)


def _cpu_stall_findings(
    window: Window,
    cw: ContainerWindow,
    cid: int,
    cms: dict[int, CpuMinute],
    clock: Clock,
    throttle: dict[str, Any] | None,
    th: Thresholds,
    now: float,
    idents: Mapping[int, Identity],
) -> list[Finding]:
    latest = cms[clock.latest]
    sev = _cpu_severity(latest, th)
    first = float(_run_start(list(cms), lambda m: cms[m].stalled(th), clock.latest))
    last = float(clock.latest + 60)
    shares = blame_shares(window, cid, now, th, clock, idents)
    ev = _cpu_evidence(cms, clock, throttle)
    ev["probe_loaded"] = window.probe_loaded
    ev["blame"] = [
        {"culprit_kind": b.culprit_kind, "culprit": b.ref, "share": b.share, "seconds": b.seconds}
        for b in shares[:5]
    ]
    stall_txt = f"cpu some {_pct(latest.some)}, run-queue p99 " + _ms(
        latest.runq.p99_s if latest.runq else None
    )
    vname = cw.identity.name
    out: list[Finding] = []
    for b in shares:
        if b.culprit_kind not in NAMEABLE_CULPRIT_KINDS or b.share < th.blame_share:
            continue
        assert isinstance(b.key, int) and b.identity is not None
        ccw = window.containers.get(b.key)
        usage = cpu_usage_cores(_folds(ccw, clock.window), th) if ccw is not None else None
        request = b.identity.cpu_request_cores
        if usage is not None and request is not None and usage <= request:
            continue  # inside its request: entitled to the CPU, not the problem
        culprit = Culprit(
            kind=b.culprit_kind,
            ref=b.ref,
            cgroup_id=b.key,
            identity=b.identity,
            blame_share=b.share,
            cpu_usage_cores=usage,
            cpu_request_cores=request,
        )
        use_txt = "n/a (not sampled)" if usage is None else f"{usage:.2f} cores"
        req_txt = "no request" if request is None else f"a request of {request:g} cores"
        out.append(
            Finding(
                kind=Kind.NOISY_NEIGHBOR,
                severity=sev,
                victim=Victim(cid, cw.identity),
                culprit=culprit,
                evidence=ev,
                first_seen=first,
                last_seen=last,
                message=(
                    f"{vname} is stalled ({stall_txt}); {b.ref} ({b.culprit_kind}) caused "
                    f"{_pct(b.share)} of its run-queue wait over {th.window_minutes}m, "
                    f"using {use_txt} against {req_txt}"
                ),
                remediation=REMEDIATION[Kind.NOISY_NEIGHBOR],
            )
        )
    if out:
        return out
    why = (
        "no scheduler probe data, so no culprit can be named"
        if not shares
        else "no single neighbour passes the culprit test: the node is oversubscribed"
    )
    return [
        Finding(
            kind=Kind.CPU_CONTENDED,
            severity=sev,
            victim=Victim(cid, cw.identity),
            culprit=None,
            evidence=ev,
            first_seen=first,
            last_seen=last,
            message=f"{vname} is stalled waiting for CPU ({stall_txt}); {why}",
            remediation=REMEDIATION[Kind.CPU_CONTENDED],
        )
    ]


def _mem_evidence(
    cw: ContainerWindow,
    by_min: dict[int, MinuteFold],
    node: dict[int, NodeFold],
    clock: Clock,
    wfolds: list[MinuteFold],
) -> dict[str, Any]:
    fs = [by_min[m] for m in clock.sustain]
    lf = by_min[clock.latest]
    events: dict[str, int] = {}
    for f in wfolds:
        for k, v in f.mem_events.items():
            events[k] = events.get(k, 0) + v
    return {
        "memory_pressure_some": [_frac(f.mem_some_s, f.seconds) for f in fs],
        "memory_pressure_full": _frac(lf.mem_full_s, lf.seconds),
        "refaults_per_minute": [f.refaults / f.seconds * 60 if f.seconds else 0.0 for f in fs],
        "limit_hits": [_limit_hits(f) for f in fs],
        "memory_events": events,
        "node_memory_pressure_some": [
            _frac(n.mem_some_s, n.seconds) if (n := node.get(m)) else None for m in clock.sustain
        ],
        "working_set_bytes": lf.working_set_bytes,
        "memory_bytes": lf.memory_bytes,
        "memory_limit_bytes": cw.memory_limit_bytes,
        "memory_request_bytes": cw.identity.memory_request_bytes,
        "minutes": list(clock.sustain),
    }


def _memory_pressure(
    window: Window,
    clock: Clock,
    cw: ContainerWindow,
    victim: Victim,
    overages: list[Overage],
    ev: dict[str, Any],
    sev: Severity,
    first: float,
    th: Thresholds,
    idents: Mapping[int, Identity],
) -> Finding:
    culprit = None
    top = overages[0] if overages else None
    if top is not None and _ge(top.share, th.mem_culprit_share):
        assert top.share is not None
        ccw = window.containers.get(top.cgroup_id)
        usage = cpu_usage_cores(_folds(ccw, clock.window), th) if ccw is not None else None
        named = classify_culprit(top.cgroup_id, idents)
        culprit = Culprit(
            kind=str(named.kind),
            ref=named.culprit,
            cgroup_id=top.cgroup_id,
            identity=top.identity,
            blame_share=top.share,
            cpu_usage_cores=usage,
            cpu_request_cores=top.identity.cpu_request_cores,
            memory_overage_bytes=top.bytes,
            heuristic=True,
        )
    ev = dict(ev)
    ev["memory_overage_top"] = [
        {"culprit": o.identity.name, "bytes": o.bytes, "share": o.share} for o in overages[:3]
    ]
    who = (
        f"heuristic culprit: {culprit.ref}, {_pct(culprit.blame_share)} of the node's memory "
        "beyond requests"
        if culprit
        else "no single container dominates the node's memory beyond requests"
    )
    return Finding(
        kind=Kind.MEMORY_PRESSURE,
        severity=sev,
        victim=victim,
        culprit=culprit,
        evidence=ev,
        first_seen=first,
        last_seen=float(clock.latest + 60),
        message=(
            f"{cw.identity.name} is stalled on memory (some "
            f"{_pct(ev['memory_pressure_some'][-1])}, {ev['refaults_per_minute'][-1]:.0f} "
            f"refaults/min) while the node is under memory pressure "
            f"({_pct(ev['node_memory_pressure_some'][-1])}); {who}"
        ),
        remediation=REMEDIATION[Kind.MEMORY_PRESSURE],
    )
