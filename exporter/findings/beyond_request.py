"""The usage side of the culprit test: does a culprit run beyond its own CPU request?

Judged over the window, and also over the window as it stood at each earlier minute
boundary of the sustain minutes: the part of the window up to that boundary, the
same arithmetic over fewer minutes (docs/findings.md#no-kind-flip-while-a-finding-decays).
A culprit beyond its request at any of them is not excused, so a neighbour that stops
mid-minute, or just after a minute boundary, keeps the victim's finding a
noisy-neighbor while the stall it caused is still in the sustain minutes: its use
over the whole window, diluted by the minutes after it stopped, would otherwise fall
to its request and turn the same incident into a cpu-contended one. The rules read the
same prefixes (``rate(x[<w-k>m] offset <k>m)``; ``exporter.rules.recording``).
"""

from __future__ import annotations

from dataclasses import replace

from ..window.model import ContainerWindow, Window
from .aggregates import Clock, WorkloadUse, cpu_usage_cores, folds_in, workload_use
from .thresholds import Thresholds


def earlier_boundaries(th: Thresholds) -> range:
    """How many minutes before the window's end each earlier judgement ends: the minute
    boundaries of the sustain minutes before the latest one, and the one they start at
    (``1 .. sustainMinutes``), while a minute of the window is left before it."""
    return range(1, min(th.sustain_minutes, th.window_minutes - 1) + 1)


def judged(clock: Clock, th: Thresholds) -> list[tuple[Clock, Thresholds]]:
    """The window, then the part of it up to each earlier boundary
    (:func:`earlier_boundaries`), newest first, each with the thresholds of a window of
    its length (its rates divide by its range, as ``rate(x[<w-k>m] offset <k>m)``)."""
    out = [(clock, th)]
    for k in earlier_boundaries(th):
        prefix = replace(clock, window=clock.window[:-k])
        out.append((prefix, replace(th, window_minutes=th.window_minutes - k)))
    return out


def container_entitled(
    ccw: ContainerWindow | None, request: float | None, clock: Clock, th: Thresholds
) -> bool:
    """Inside its request: its use over the window is known and at most its request,
    and was at none of the earlier boundaries above it. A culprit without a request,
    or whose use is not known (not sampled, gone), is never entitled."""
    if ccw is None or request is None:
        return False
    uses = [cpu_usage_cores(folds_in(ccw, c.window), t) for c, t in judged(clock, th)]
    if uses[0] is None or uses[0] > request:
        return False
    return not any(u is not None and u > request for u in uses[1:])


def workload_entitled(
    window: Window, namespace: str, workload: str, clock: Clock, th: Thresholds
) -> tuple[bool, WorkloadUse]:
    """A workload's running containers inside their summed requests over the window
    (``WorkloadUse.entitled``) and at none of the earlier boundaries above them, each
    judged with the members that ran in the minute before that boundary, gone ones
    included (a replica that caused the wait and was replaced still counts for the
    minutes it ran, also when it was replaced seconds before the boundary by one too
    young to have a measured use); with the window's use, for the finding."""
    uses = [workload_use(window, namespace, workload, clock, th)]
    uses += [
        workload_use(window, namespace, workload, c, t, gone_after=c.window[-1])
        for c, t in judged(clock, th)[1:]
        if c.window
    ]
    if not uses[0].entitled():
        return False, uses[0]
    return not any(_above(u) for u in uses[1:]), uses[0]


def _above(use: WorkloadUse) -> bool:
    u, r = use.usage_cores, use.request_cores
    return u is not None and r is not None and r > 0 and u > r
