"""The numbers of each finding's remediation, from the window (docs/findings.md).

One function per kind, each in the arithmetic order of its recording rule in
``exporter.rules`` (``cgroup:contention_cpu_demand_millicores:ceil_rate<w>`` and the
others), so the evaluator and Prometheus suggest the same value. What cannot be
computed is said (``Suggestion.reason``), never guessed.
"""

from __future__ import annotations

import math
from typing import Any

from ..identity import Identity
from ..probe.burst import BURST_BOUNDS, peak_threads, share_above, window_burst
from ..window.model import ContainerWindow, MinuteFold, Window
from .aggregates import Clock, MemberUse, folds_in, member_uses, throttle_totals
from .model import Culprit, Kind
from .remediation import MIB, MILLI, PAGE_BYTES, Suggestion, mebibytes, millicores
from .signals import at_least
from .thresholds import Thresholds


def _latest(cw: ContainerWindow | None, clock: Clock) -> MinuteFold | None:
    if cw is None:
        return None
    return next((f for f in cw.folds if f.minute == clock.latest), None)


def cpu_limit(
    cw: ContainerWindow, wfolds: list[MinuteFold], th: Thresholds, node_cores: float = 0.0
) -> Suggestion:
    """cpu-throttled: the limit that covers its average use plus the time it was held
    back, ``ceil((rate(usage) + rate(throttled_seconds)) / rate(sampled) * 1000)``, when
    that is above its limit and it was throttled in nearly every period (steady demand);
    else the burst limit. ``node_cores``: the node's CPUs, which a burst limit may not
    exceed (0: unknown)."""
    w = th.window_minutes
    limit = cw.cpu_limit_cores
    basis: dict[str, float | None] = {"cpu_limit_cores": limit}
    secs = sum(f.seconds for f in wfolds)
    if not wfolds or secs <= 0:
        return _none(Kind.CPU_THROTTLED, w, basis, "no CPU usage history in the window")
    if all(f.throttled_s is None for f in wfolds):
        return _none(Kind.CPU_THROTTLED, w, basis, "the kernel reported no throttled time for it")
    r = float(th.window_s)
    used = sum(f.cpu_usage_s for f in wfolds)
    held = sum(f.throttled_s or 0.0 for f in wfolds)
    demand = (used / r + held / r) / (secs / r)
    basis.update(
        cpu_usage_cores=used / secs, cpu_throttled_cores=held / secs, cpu_demand_cores=demand
    )
    value = millicores(demand)
    if limit is None:
        return Suggestion(Kind.CPU_THROTTLED, value, basis, window_minutes=w)
    if value <= limit * 1000:
        fits = f"its average demand ({demand:.3f} cores) fits its current limit ({limit:g})"
        return burst_limit(limit, wfolds, basis, fits, th, node_cores)
    totals = throttle_totals(wfolds, th)
    ratio = None if totals is None else totals["ratio"]
    if ratio is None or ratio < th.steady_throttled_ratio:
        # Throttled in some periods only: at its average demand the periods of a burst
        # would still drain the quota (one thread bursting 100 ms a second under 250m
        # uses 0.1 and is held back about 0.2 cores, yet is throttled at 300m too).
        fits = (
            f"it was throttled in {'an unknown share' if ratio is None else f'{ratio:.0%}'}"
            f" of its periods, not in nearly all (at least {th.steady_throttled_ratio:.0%}):"
            f" its demand comes in bursts, which its average ({demand:.3f} cores) cannot size"
        )
        return burst_limit(limit, wfolds, basis, fits, th, node_cores)
    return Suggestion(Kind.CPU_THROTTLED, value, basis, window_minutes=w)


def burst_limit(
    limit: float,
    wfolds: list[MinuteFold],
    basis: dict[str, Any],
    fits: str,
    th: Thresholds,
    node_cores: float = 0.0,
) -> Suggestion:
    """cpu-throttled whose average cannot size a limit (it fits the limit, or the container was
    throttled in some periods only: bursts): the fewest cores, among the burst histogram's
    bounds, that the threads wanting a CPU at once exceeded in less than
    ``throttledRatioMax`` of the times one was queued over the window; as in PromQL, per
    bound ``b`` ascending, ``(increase(count) - increase(bucket{le=b})) / increase(count) <
    max``, the first that holds (docs/findings.md#cpu-throttled-in-bursts). Never at or
    below the limit."""
    w, ratio_max = th.window_minutes, th.throttled_ratio_max
    counts = window_burst(wfolds)
    if counts is None:
        why = (
            f"{fits}: it is throttled by bursts shorter than the window, which an average "
            "cannot size, and its burst demand was not measured (the scheduler probe is not "
            "loaded, or has no burst count)"
        )
        return _none(Kind.CPU_THROTTLED, w, basis, why)
    seen = sum(counts)
    basis = dict(basis, runnable_threads_observations=seen)
    if seen == 0:
        why = f"{fits}, and none of its threads was seen wanting a CPU in the window"
        return _none(Kind.CPU_THROTTLED, w, basis, why)
    threads = next((b for b in BURST_BOUNDS if _below(share_above(counts, b), ratio_max)), None)
    if threads is None:
        why = (
            f"{fits}, and more than {BURST_BOUNDS[-1]} of its threads wanted a CPU at once "
            f"in at least {ratio_max:.0%} of the times one was queued: more than the burst "
            "histogram can size; remove the limit or size its thread pools to it"
        )
        return _none(Kind.CPU_THROTTLED, w, basis, why)
    peak = peak_threads(counts)
    basis.update(
        runnable_threads=threads,
        runnable_threads_share_above=share_above(counts, threads),
        # JSON has no infinity: null when some observation had more than the largest bound
        runnable_threads_peak=peak if peak is not None and math.isfinite(peak) else None,
    )
    value = threads * MILLI
    if node_cores > 0 and threads > node_cores:
        # A limit above the node's CPUs limits nothing: the threads are held back by the
        # node then, and whatever stops the throttling is the limit's removal.
        why = (
            f"{fits}, and up to {threads} of its threads wanted a CPU at once in all but "
            f"{ratio_max:.0%} of the times one was queued: more than the node's "
            f"{node_cores:g} CPUs, so no limit the node can honour stops the throttling; "
            "remove the limit or size its thread pools to it"
        )
        return _none(Kind.CPU_THROTTLED, w, basis, why)
    if value <= limit * 1000:
        why = (
            f"{fits}, and up to {threads} of its threads wanted a CPU at once in all but "
            f"{ratio_max:.0%} of the times one was queued, which its limit allows: the "
            "bursts that throttle it are too rare among those times to size a limit"
        )
        return _none(Kind.CPU_THROTTLED, w, basis, why)
    return Suggestion(
        Kind.CPU_THROTTLED,
        value,
        basis,
        window_minutes=w,
        burst_threads=threads,
        burst_max_pct=f"{ratio_max * 100:g}",
    )


def _below(share: float | None, ratio_max: float) -> bool:
    return share is not None and share < ratio_max


def cpu_request(
    culprit_name: str,
    ccw: ContainerWindow | None,
    usage: float | None,
    request: float | None,
    clock: Clock,
    th: Thresholds,
) -> Suggestion:
    """noisy-neighbor: the culprit's request matching its measured use,
    ``ceil(usage over the window * 1000)``, while it still runs."""
    w = th.window_minutes
    basis = {"cpu_usage_cores": usage, "cpu_request_cores": request}
    if ccw is None or usage is None:
        why = "its CPU use is not sampled (an untracked cgroup, the kernel or an opted-out pod)"
        return _none(Kind.NOISY_NEIGHBOR, w, basis, why, culprit_name)
    if _latest(ccw, clock) is None:
        why = "it was gone before the window ended, so its use over the window is not known"
        return _none(Kind.NOISY_NEIGHBOR, w, basis, why, culprit_name)
    if request is not None and usage <= request:
        return _none(Kind.NOISY_NEIGHBOR, w, basis, _SLOWED, culprit_name, slowed=True)
    return Suggestion(
        Kind.NOISY_NEIGHBOR, millicores(usage), basis, culprit=culprit_name, window_minutes=w
    )


def workload_request(c: Culprit, window: Window, clock: Clock, th: Thresholds) -> Suggestion:
    """noisy-neighbor with a workload culprit: CPU requests adding up to its running
    containers' summed use, ``ceil(sum of their usage over the window * 1000)``, the
    number the workload's culprit test compared with their summed requests
    (docs/findings.md#workload-culprits). When none of them has a measured use yet,
    from the use its members were measured at (:func:`workload_request_from_members`)."""
    w = th.window_minutes
    basis = {"cpu_usage_cores": c.cpu_usage_cores, "cpu_request_cores": c.cpu_request_cores}
    if c.cpu_usage_cores is None:
        members = member_uses(window, c.identity.namespace, c.identity.workload, clock, th)
        return workload_request_from_members(c, members, basis, th)
    r = c.cpu_request_cores
    if r is not None and r > 0 and c.cpu_usage_cores <= r:
        return _none(Kind.NOISY_NEIGHBOR, w, basis, _SLOWED, c.ref, workload=True, slowed=True)
    return Suggestion(
        Kind.NOISY_NEIGHBOR,
        millicores(c.cpu_usage_cores),
        basis,
        culprit=c.ref,
        window_minutes=w,
        workload=True,
    )


def workload_request_from_members(
    c: Culprit, members: MemberUse, basis: dict[str, Any], th: Thresholds
) -> Suggestion:
    """A workload culprit none of whose running containers has a measured use yet (the
    replica that just started, as in a Deployment crash-looping faster than two sampler
    passes): requests for as many containers as run now (``n``, at least one) at the
    average of each member's own use over the window, gone ones included,
    ``ceil(n * (sum of their uses / their count) * 1000)``. No number with no member
    measured, nor when the measured ones used no more than they request on average
    (requests at their use would be no higher than theirs: it would change nothing)."""
    w = th.window_minutes
    mean = members.mean
    basis = dict(
        basis,
        member_cpu_usage_cores=mean,
        member_cpu_request_cores=members.mean_request,
        measured_containers=len(members.uses),
        running_containers=members.running,
    )
    if mean is None:
        why = "none of its containers, running or gone, has a measured use over the window yet"
        return _none(Kind.NOISY_NEIGHBOR, w, basis, why, c.ref, workload=True)
    if members.within():
        why = (
            "none of its running containers has a measured use over the window yet, and "
            "those measured, gone ones included, used no more than they request on "
            "average: requests matching their use would change nothing"
        )
        return _none(Kind.NOISY_NEIGHBOR, w, basis, why, c.ref, workload=True)
    n = max(members.running, 1)
    return Suggestion(
        Kind.NOISY_NEIGHBOR,
        millicores(n * mean),
        basis,
        culprit=c.ref,
        window_minutes=w,
        workload=True,
        workload_each=millicores(mean),
        workload_running=n,
    )


def node_cpu_short(
    window: Window, clock: Clock, th: Thresholds, steal: float | None = None
) -> Suggestion:
    """cpu-contended: the run-queue wait of the node's containers over the window, per
    second: on average how much runnable work found no CPU,
    ``ceil(sum(increase(wait)) / window_s * 1000)``. Containers throttled at or above
    ``throttledRatioMax`` are left out: they wait on their own quota, not on the node.
    ``steal``: the node's latest steal share while cpu-steal is sustained; the sentence
    then points at the VM's host first (docs/findings.md#cpu-steal)."""
    w = th.window_minutes
    under_steal = steal is not None
    total: float | None = None
    excluded = 0
    for cw in window.containers.values():
        folds = folds_in(cw, clock.window)
        waits = [f.runq_sum_s for f in folds if f.runq_sum_s is not None]
        if not waits:
            continue
        throttle = throttle_totals(folds, th)
        if throttle is not None and at_least(throttle["ratio"], th.throttled_ratio_max):
            excluded += 1
            continue
        total = (total or 0.0) + sum(waits)
    basis: dict[str, float | None] = {
        "runqueue_wait_seconds": total,
        "node_cpu_cores": window.node_cpu_cores or None,
        "throttled_containers_left_out": excluded,
    }
    if under_steal:
        basis["node_cpu_steal_ratio"] = steal
    if total is None:
        why = "no run-queue wait data (the scheduler probe is not loaded)"
        return _none(Kind.CPU_CONTENDED, w, basis, why, under_steal=under_steal)
    value = millicores(total / th.window_s)
    if value <= 0:
        why = "its containers' run-queue wait over the window rounds to no CPU at all"
        return _none(Kind.CPU_CONTENDED, w, basis, why, under_steal=under_steal)
    return Suggestion(Kind.CPU_CONTENDED, value, basis, window_minutes=w, under_steal=under_steal)


def memory_limit(cw: ContainerWindow, latest: MinuteFold, th: Thresholds) -> Suggestion:
    """memory-limit-thrash: its working set plus the pages it read back in the latest
    minute, ``ceil((working_set + refaults * 4096) / 1048576)`` MiB, above its limit."""
    w = th.window_minutes
    ws, limit = latest.working_set_bytes, cw.memory_limit_bytes
    basis: dict[str, float | None] = {
        "working_set_bytes": ws,
        "refaults_latest_minute": latest.refaults,
        "memory_limit_bytes": limit,
    }
    if ws is None:
        why = "no working set reported for the latest minute"
        return _none(Kind.MEMORY_LIMIT_THRASH, w, basis, why)
    value = mebibytes(ws + latest.refaults * PAGE_BYTES)
    if limit is not None and value <= limit / MIB:
        why = (
            "its working set plus the pages it read back fits under its current limit: "
            "it is held back by memory.high or by bursts within the minute"
        )
        return _none(Kind.MEMORY_LIMIT_THRASH, w, basis, why)
    return Suggestion(Kind.MEMORY_LIMIT_THRASH, value, basis, window_minutes=w)


def memory_request(
    culprit: Identity | None, ccw: ContainerWindow | None, clock: Clock, th: Thresholds
) -> Suggestion:
    """memory-pressure: the request the heuristic culprit would need to cover its working
    set, ``ceil(working_set / 1048576)`` MiB."""
    w = th.window_minutes
    if culprit is None:
        why = (
            "no container grew by memCulpritShare of the node's memory beyond requests "
            "over the window, nor holds that share of it"
        )
        return _none(Kind.MEMORY_PRESSURE, w, {}, why)
    name = mem_culprit_name(culprit)
    latest = _latest(ccw, clock)
    ws = latest.working_set_bytes if latest is not None else None
    basis = {"working_set_bytes": ws, "memory_request_bytes": culprit.memory_request_bytes}
    if ws is None:
        why = "no working set reported for it in the latest minute"
        return _none(Kind.MEMORY_PRESSURE, w, basis, why, name)
    return Suggestion(Kind.MEMORY_PRESSURE, mebibytes(ws), basis, culprit=name, window_minutes=w)


def mem_culprit_name(ident: Identity) -> str:
    """How the memory-pressure alert names its culprit: ``namespace/pod/container``
    when the pod is known, else the cgroup path."""
    if ident.pod:
        return f"{ident.namespace}/{ident.pod}/{ident.container}"
    return ident.cgroup


# A culprit named for an earlier minute boundary of the sustain
# (docs/findings.md#no-kind-flip-while-a-finding-decays).
_SLOWED = (
    "its use over the window has fallen to its request: it ran beyond it up to an earlier "
    "minute and has slowed down or stopped since, so a request matching its use would "
    "change nothing"
)


def _none(
    kind: str,
    w: int,
    basis: dict[str, Any],
    why: str,
    culprit: str = "",
    under_steal: bool = False,
    workload: bool = False,
    slowed: bool = False,
) -> Suggestion:
    return Suggestion(
        kind,
        None,
        dict(basis),
        reason=why,
        culprit=culprit,
        window_minutes=w,
        under_steal=under_steal,
        workload=workload,
        slowed=slowed,
    )
