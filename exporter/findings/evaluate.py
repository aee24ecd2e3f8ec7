"""The finding decisions: docs/findings.md's gating rules over the window. No I/O.

The per-minute signals (``signals``) and window aggregates (``aggregates``) are
computed in the same arithmetic as the generated rules (``exporter.rules``), so the
evaluator and Prometheus agree to the bit on the scenario corpus (tests/scenarios).
docs/findings.md says why both use per-minute PSI fractions rather than ``avg10``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..cgroupfs.discovery import CgroupKind
from ..identity import Identity
from ..probe.blame import (
    DEFAULT_TOP_K,
    TopCulprits,
    WorkloadShare,
    blame_shares,
    top_culprits,
)
from ..probe.culprit import CulpritKind, classify_culprit
from ..window.model import ContainerWindow, MinuteFold, NodeFold, Window
from . import messages, suggest
from .aggregates import (
    Clock,
    Overage,
    cpu_usage_cores,
    folds_in,
    identities,
    memory_culprit,
    memory_overages,
    named_shares,
    throttle_totals,
    watched,
    window_blame,
)
from .beyond_request import container_entitled, workload_entitled
from .model import (
    CULPRIT_HYPERVISOR,
    CULPRIT_WORKLOAD,
    NAMEABLE_CULPRIT_KINDS,
    REMEDIATION,
    REMEDIATION_CONTENDED_STEAL,
    REMEDIATION_CONTENDED_UNATTRIBUTED,
    Culprit,
    Finding,
    Kind,
    Severity,
    Victim,
    sort_findings,
)
from .remediation import Suggestion
from .signals import (
    CpuMinute,
    at_least,
    cpu_minute,
    frac,
    limit_hits,
    mem_stalled,
    node_mem_beyond,
    node_pressure,
    node_steal,
)
from .thresholds import Thresholds


def evaluate(
    window: Window, thresholds: Thresholds, now: float, top_k: int = DEFAULT_TOP_K
) -> list[Finding]:
    """All findings for the window at ``now`` (epoch seconds), most severe first.
    ``top_k``: the culprits judged per victim, the ``--probe.top-k`` the blame series
    are exported with (the rules see only those)."""
    th = thresholds
    clock = Clock.at(now, th, window)
    node = {n.minute: n for n in window.node}
    ctx = _Context(window, th, now, clock, identities(window), node, top_k)
    findings: list[Finding] = []
    for cid, cw in sorted(window.containers.items(), key=lambda kv: kv[1].identity.cgroup):
        if watched(cw, clock):  # too young to judge otherwise (it can still be a culprit)
            findings += _judge(ctx, cid, cw)
    steal = _cpu_steal(ctx, [f for f in findings if f.kind in _CPU_STALL_KINDS])
    if steal is not None:
        findings.append(steal)
    return sort_findings(findings)


_CPU_STALL_KINDS = (Kind.NOISY_NEIGHBOR, Kind.CPU_CONTENDED)
# The victim of a node-level finding: the node (no cgroup; docs/findings.md#cpu-steal).
NODE = Identity(cgroup="", kind=CgroupKind.ROOT)


class _Context:
    """What every victim's judgement shares within one evaluation."""

    def __init__(
        self,
        window: Window,
        th: Thresholds,
        now: float,
        clock: Clock,
        idents: Mapping[int, Identity],
        node: dict[int, NodeFold],
        top_k: int,
    ) -> None:
        self.window, self.th, self.now, self.clock = window, th, now, clock
        self.idents, self.node, self.top_k = idents, node, top_k
        self._overages: list[Overage] | None = None
        # The node's CPU steal share in each sustain minute (None: not measured).
        self.steal = [node_steal(node.get(m), window.node_cpu_cores) for m in clock.sustain]
        self.steal_sustained = all(at_least(x, th.cpu_steal_ratio) for x in self.steal)
        self._node_short: Suggestion | None = None

    def overages(self) -> list[Overage]:
        if self._overages is None:  # only when some victim is under node pressure
            self._overages = memory_overages(self.window, self.now, self.th)
        return self._overages

    def node_short(self) -> Suggestion:
        if self._node_short is None:  # only when some victim is cpu-contended
            steal = self.steal[-1] if self.steal_sustained else None
            self._node_short = suggest.node_cpu_short(self.window, self.clock, self.th, steal)
        return self._node_short


def _judge(ctx: _Context, cid: int, cw: ContainerWindow) -> list[Finding]:
    th, clock = ctx.th, ctx.clock
    wfolds = folds_in(cw, clock.window)
    by_min = {f.minute: f for f in wfolds}
    cms = {m: cpu_minute(f, th) for m, f in by_min.items()}
    throttle = throttle_totals(wfolds, th)
    tratio = throttle["ratio"] if throttle else None
    out: list[Finding] = []
    # cpu-throttled: its own quota, never a culprit.
    if throttle is not None and tratio is not None and at_least(tratio, th.throttled_ratio):
        out.append(_throttled(ctx, cid, cw, cms, wfolds, throttle, tratio))
    # CPU stall, sustained, and not self-throttled (the hard gate).
    sustained = all(m in cms and cms[m].stalled(th) for m in clock.sustain)
    if sustained and not at_least(tratio, th.throttled_ratio_max):
        out += _cpu_stall_findings(ctx, cw, cid, cms, throttle)
    memory = _memory_finding(ctx, cid, cw, by_min, wfolds)
    if memory is not None:
        out.append(memory)
    return out


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
    return {
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


def _throttled(
    ctx: _Context,
    cid: int,
    cw: ContainerWindow,
    cms: dict[int, CpuMinute],
    wfolds: list[MinuteFold],
    throttle: dict[str, Any],
    ratio: float,
) -> Finding:
    clock = ctx.clock
    thr_minutes = [f.minute for f in wfolds if (f.throttled_periods or 0) > 0]
    ev = _cpu_evidence(cms, clock, throttle)
    ev["cpu_limit_cores"] = cw.cpu_limit_cores
    return Finding(
        kind=Kind.CPU_THROTTLED,
        severity=_cpu_severity(cms.get(clock.latest), ctx.th),
        victim=Victim(cid, cw.identity),
        culprit=None,
        evidence=ev,
        first_seen=float(min(thr_minutes, default=clock.latest)),
        last_seen=float(max(thr_minutes, default=clock.latest) + 60),
        message=messages.throttled(cw.identity.name, ratio, throttle, cw.cpu_limit_cores, ctx.th),
        remediation=REMEDIATION[Kind.CPU_THROTTLED],
        suggestion=suggest.cpu_limit(cw, wfolds, ctx.th, ctx.window.node_cpu_cores),
    )


def _cpu_stall_findings(
    ctx: _Context,
    cw: ContainerWindow,
    cid: int,
    cms: dict[int, CpuMinute],
    throttle: dict[str, Any] | None,
) -> list[Finding]:
    th, clock, window = ctx.th, ctx.clock, ctx.window
    latest = cms[clock.latest]
    sev = _cpu_severity(latest, th)
    first = float(_run_start(list(cms), lambda m: cms[m].stalled(th), clock.latest))
    last = float(clock.latest + 60)
    blame = window_blame(window, cid, ctx.now, th, clock)
    # Every culprit for the evidence; the test judges the victim's top K culprits only,
    # single ones and workloads together: what the blame series export to the rules.
    shares = named_shares(blame, blame_shares(blame, ctx.idents), cid, ctx.idents)
    top = top_culprits(blame, ctx.idents, cid, ctx.top_k)
    ev = _cpu_evidence(cms, clock, throttle)
    ev["probe_loaded"] = window.probe_loaded
    ev["node_cpu_steal_ratio"] = list(ctx.steal)
    ev["blame"] = [
        {"culprit_kind": b.culprit_kind, "culprit": b.ref, "share": b.share, "seconds": b.seconds}
        for b in shares[:5]
    ]
    unattributed = unattributed_share(top)
    ev["unattributed_share"] = unattributed
    stall = messages.cpu_stall(latest)
    steal = ctx.steal[-1] if ctx.steal_sustained else None
    victim = Victim(cid, cw.identity)

    def noisy(culprit: Culprit, suggestion: Suggestion | None) -> Finding:
        return Finding(
            kind=Kind.NOISY_NEIGHBOR,
            severity=sev,
            victim=victim,
            culprit=culprit,
            evidence=ev,
            first_seen=first,
            last_seen=last,
            message=messages.noisy_neighbor(cw.identity.name, stall, culprit, th, steal),
            remediation=REMEDIATION[Kind.NOISY_NEIGHBOR],
            suggestion=suggestion,
        )

    out: list[Finding] = []
    for b in named_shares(blame, top.containers, cid, ctx.idents):
        if b.culprit_kind not in NAMEABLE_CULPRIT_KINDS or b.share < th.blame_share:
            continue
        assert isinstance(b.key, int) and b.identity is not None
        ccw = window.containers.get(b.key)
        usage = cpu_usage_cores(folds_in(ccw, clock.window), th) if ccw is not None else None
        request = b.identity.cpu_request_cores
        if container_entitled(ccw, request, clock, th):
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
        out.append(noisy(culprit, suggest.cpu_request(b.ref, ccw, usage, request, clock, th)))
    if not out:  # no container alone: the containers of one workload together?
        out = [
            noisy(c, suggest.workload_request(c, window, clock, th))
            for c in _workload_culprits(ctx, top)
        ]
    if out:
        return out
    # Attribution broken or partial: the culprit test could not see who ran.
    broken = unattributed if at_least(unattributed, th.blame_share) else None
    return [
        Finding(
            kind=Kind.CPU_CONTENDED,
            severity=sev,
            victim=victim,
            culprit=None,
            evidence=ev,
            first_seen=first,
            last_seen=last,
            message=messages.cpu_contended(
                cw.identity.name, stall, bool(shares), steal, broken, th.window_minutes
            ),
            remediation=_contended_remediation(steal, broken),
            suggestion=ctx.node_short(),
        )
    ]


def unattributed_share(top: TopCulprits) -> float | None:
    """The share of the victim's wait the probe could not attribute (``unknown``:
    unresolved cgroup ids and unattributed wait) among its exported top culprits, as
    ``sum(contention_blame_ratio{culprit_kind="unknown"})``; None without blame."""
    if not top.containers:
        return None
    return sum(b.share for b in top.containers if b.culprit.kind is CulpritKind.UNKNOWN)


def _contended_remediation(steal: float | None, broken: float | None) -> str:
    if steal is not None:
        return REMEDIATION_CONTENDED_STEAL
    if broken is not None:
        return REMEDIATION_CONTENDED_UNATTRIBUTED
    return REMEDIATION[Kind.CPU_CONTENDED]


def _workload_culprits(ctx: _Context, top: TopCulprits) -> list[Culprit]:
    """The victim's top workloads whose containers together pass the culprit test:
    their summed share of its wait at or above blameShare, and their running members'
    summed use above their summed requests, over the window or at an earlier minute
    boundary of the sustain (docs/findings.md#workload-culprits)."""
    th, clock = ctx.th, ctx.clock
    out = []
    for ws in top.workloads:
        if ws.share < th.blame_share:
            continue
        entitled, use = workload_entitled(ctx.window, ws.namespace, ws.workload, clock, th)
        if entitled:
            continue  # inside its requests: entitled to the CPU, not the problem
        out.append(_workload_culprit(ws, use.usage_cores, use.request_cores))
    return out


def _workload_culprit(ws: WorkloadShare, usage: float | None, request: float | None) -> Culprit:
    ident = Identity(cgroup="", kind=CgroupKind.OTHER, namespace=ws.namespace, workload=ws.workload)
    return Culprit(
        kind=CULPRIT_WORKLOAD,
        ref=ws.ref,
        cgroup_id=0,
        identity=ident,
        blame_share=ws.share,
        cpu_usage_cores=usage,
        cpu_request_cores=request,
        members=len(ws.members),
    )


def _cpu_steal(ctx: _Context, stalled: list[Finding]) -> Finding | None:
    """cpu-steal: the hypervisor took at least cpuStealRatio of the node's CPU time in
    each sustain minute while at least one container was a CPU-stall victim (stalled in
    each sustain minute, not self-throttled: noisy-neighbor or cpu-contended)."""
    if not ctx.steal_sustained or not stalled:
        return None
    th, clock = ctx.th, ctx.clock
    latest = ctx.steal[-1]
    assert latest is not None
    victims = sorted({f.victim.identity.name for f in stalled})
    first = _run_start(
        ctx.node,
        lambda m: at_least(node_steal(ctx.node[m], ctx.window.node_cpu_cores), th.cpu_steal_ratio),
        clock.latest,
    )
    culprit = Culprit(
        kind=CULPRIT_HYPERVISOR,
        ref=CULPRIT_HYPERVISOR,
        cgroup_id=0,
        identity=NODE,
        blame_share=latest,
        cpu_usage_cores=None,
        cpu_request_cores=None,
    )
    evidence = {
        "minutes": list(clock.sustain),
        "node_cpu_steal_ratio": list(ctx.steal),
        "node_cpu_cores": ctx.window.node_cpu_cores,
        "stalled_containers": victims,
    }
    return Finding(
        kind=Kind.CPU_STEAL,
        severity=Severity.WARNING,
        victim=Victim(0, NODE),
        culprit=culprit,
        evidence=evidence,
        first_seen=float(first),
        last_seen=float(clock.latest + 60),
        message=messages.cpu_steal(latest, victims, th),
        remediation=REMEDIATION[Kind.CPU_STEAL],
    )


def _memory_finding(
    ctx: _Context,
    cid: int,
    cw: ContainerWindow,
    by_min: dict[int, MinuteFold],
    wfolds: list[MinuteFold],
) -> Finding | None:
    th, clock, node = ctx.th, ctx.clock, ctx.node
    sustain_folds = [by_min.get(m) for m in clock.sustain]
    if not all(f is not None and mem_stalled(f, th) for f in sustain_folds):
        return None
    pressure = [node_pressure(node.get(m), by_min.get(m), th) for m in clock.sustain]
    lf = by_min[clock.latest]
    sev = (
        Severity.CRITICAL
        if at_least(frac(lf.mem_full_s, lf.seconds), th.critical_mem_full)
        else Severity.WARNING
    )
    ev = _mem_evidence(cw, by_min, node, clock, wfolds)

    def same_state(m: int) -> bool:
        f = by_min[m]
        return mem_stalled(f, th) and node_pressure(node.get(m), f, th) == pressure[-1]

    first = float(_run_start(list(by_min), same_state, clock.latest))
    victim = Victim(cid, cw.identity)
    if all(pressure):
        return _memory_pressure(ctx, cw, victim, ev, sev, first)
    if not any(pressure) and all(limit_hits(f) > 0 for f in sustain_folds if f):
        return Finding(
            kind=Kind.MEMORY_LIMIT_THRASH,
            severity=sev,
            victim=victim,
            culprit=None,
            evidence=ev,
            first_seen=first,
            last_seen=float(clock.latest + 60),
            message=messages.memory_limit_thrash(cw.identity.name, ev),
            remediation=REMEDIATION[Kind.MEMORY_LIMIT_THRASH],
            suggestion=suggest.memory_limit(cw, lf, th),
        )
    return None


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
        "memory_pressure_some": [frac(f.mem_some_s, f.seconds) for f in fs],
        "memory_pressure_full": frac(lf.mem_full_s, lf.seconds),
        "refaults_per_minute": [f.refaults / f.seconds * 60 if f.seconds else 0.0 for f in fs],
        "limit_hits": [limit_hits(f) for f in fs],
        "memory_events": events,
        "node_memory_pressure_some": [
            frac(n.mem_some_s, n.seconds) if (n := node.get(m)) else None for m in clock.sustain
        ],
        # What decided node pressure: the node's stall minus the victim's own in minutes
        # it hit its limit (docs/findings.md#memory-pressure).
        "node_memory_pressure_beyond_self": [
            node_mem_beyond(node.get(m), by_min[m]) for m in clock.sustain
        ],
        "working_set_bytes": lf.working_set_bytes,
        "memory_bytes": lf.memory_bytes,
        "memory_limit_bytes": cw.memory_limit_bytes,
        "memory_request_bytes": cw.identity.memory_request_bytes,
        "minutes": list(clock.sustain),
    }


def _memory_pressure(
    ctx: _Context,
    cw: ContainerWindow,
    victim: Victim,
    ev: dict[str, Any],
    sev: Severity,
    first: float,
) -> Finding:
    th, clock, window = ctx.th, ctx.clock, ctx.window
    overages = ctx.overages()
    culprit = None
    ccw = None
    top, basis = memory_culprit(overages, th)
    if top is not None:
        assert top.share is not None
        ccw = window.containers.get(top.cgroup_id)
        usage = cpu_usage_cores(folds_in(ccw, clock.window), th) if ccw is not None else None
        named = classify_culprit(top.cgroup_id, ctx.idents)
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
    ev["memory_culprit_basis"] = basis
    ev["memory_overage_top"] = [
        {"culprit": o.identity.name, "bytes": o.bytes, "share": o.share, "growth_bytes": o.growth}
        for o in overages[:3]
    ]
    return Finding(
        kind=Kind.MEMORY_PRESSURE,
        severity=sev,
        victim=victim,
        culprit=culprit,
        evidence=ev,
        first_seen=first,
        last_seen=float(clock.latest + 60),
        message=messages.memory_pressure(cw.identity, ev, culprit, th),
        remediation=REMEDIATION[Kind.MEMORY_PRESSURE],
        suggestion=suggest.memory_request(culprit.identity if culprit else None, ccw, clock, th),
    )
