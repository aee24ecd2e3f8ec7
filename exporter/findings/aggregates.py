"""Window aggregates: which minutes count, and the values over them.

Evaluated at ``now``, the *latest minute* is the last complete minute before ``now``'s
minute, the *sustain minutes* are the last ``sustainMinutes`` minutes, and the
*window* the last ``windowMinutes`` minutes (:class:`Clock`). Over those: throttle
totals, CPU usage, each culprit's share of a victim's wait, memory overages. Each is
computed in the same arithmetic order as the generated rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cgroupfs.discovery import CgroupKind
from ..identity import Identity
from ..probe.blame import BlameShare, blame_shares
from ..probe.culprit import NamedCulprit, classify_culprit
from ..window.model import ContainerWindow, CulpritKey, MinuteFold, Window
from .model import CULPRIT_SELF
from .thresholds import Thresholds


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


def folds_in(cw: ContainerWindow, minutes: Iterable[int]) -> list[MinuteFold]:
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


def identities(window: Window) -> dict[int, Identity]:
    """Every cgroup the window can name: tracked containers and ``others``."""
    out = dict(window.others)
    out.update({cid: cw.identity for cid, cw in window.containers.items()})
    return out


def window_blame(
    window: Window, cgroup_id: int, now: float, th: Thresholds, clock: Clock | None = None
) -> dict[CulpritKey, float]:
    """Wait seconds per culprit key over the window (what ``contention_blame_ratio``
    divides).

    ``clock``: ``Clock.at(now, th, window)`` when the caller has it (finding the newest
    minute looks at every container: once per pass, not once per container)."""
    cw = window.containers.get(cgroup_id)
    seconds: dict[CulpritKey, float] = {}
    if cw is None:
        return seconds
    if clock is None:
        clock = Clock.at(now, th, window)
    for f in folds_in(cw, clock.window):
        for key, s in (f.blame_s or {}).items():
            seconds[key] = seconds.get(key, 0.0) + s
    return seconds


def exported_blame(
    window: Window,
    in_progress: Mapping[int, Mapping[CulpritKey, float]],
    victims: Iterable[int],
    now: float,
    th: Thresholds,
) -> dict[int, dict[CulpritKey, float]]:
    """Each victim's wait seconds per culprit over the exported blame window (what
    ``contention_blame_ratio`` and ``contention_workload_blame_ratio`` divide): the
    complete minutes plus the minute in progress (``in_progress``: the sampler's
    ``blame_in_progress``; the evaluator keeps to complete minutes), so a young
    victim's blame share exists as soon as its stall does."""
    clock = Clock.at(now, th, window)
    blame: dict[int, dict[CulpritKey, float]] = {}
    for cid in victims:
        b = window_blame(window, cid, now, th, clock)
        for key, s in in_progress.get(cid, {}).items():
            b[key] = b.get(key, 0.0) + s
        blame[cid] = b
    return blame


@dataclass(frozen=True, slots=True)
class CulpritShare:
    """One culprit's share of a victim's run-queue wait over the window, with the blame
    key and identity a finding needs to name it."""

    key: CulpritKey  # a cgroup id, "idle" or "unattributed" (merged keys: the first)
    culprit_kind: str  # pod, system, kernel, idle, unknown, or self (the victim itself)
    ref: str  # the `culprit` label
    identity: Identity | None
    seconds: float
    share: float
    labels: dict[str, str]  # culprit_* labels, as on contention_blame_ratio


def culprit_shares(
    window: Window,
    cgroup_id: int,
    now: float,
    th: Thresholds,
    clock: Clock | None = None,
    idents: Mapping[int, Identity] | None = None,
) -> list[CulpritShare]:
    """Every culprit's share of the victim's wait over the window, largest first.

    Classification and shares are the probe's (``exporter.probe.blame``), which is what
    ``contention_blame_ratio`` exports, so the rules and the evaluator test the same
    numbers (which culprits are judged: ``top_culprits``). The victim's own cgroup is
    marked ``self`` here; the rules exclude it with a join on ``culprit_cgroup ==
    cgroup``. Empty without probe data.
    """
    sums = window_blame(window, cgroup_id, now, th, clock)
    if idents is None:
        idents = identities(window)
    return named_shares(sums, blame_shares(sums, idents), cgroup_id, idents)


def named_shares(
    sums: Mapping[CulpritKey, float],
    shares: Iterable[BlameShare],
    cgroup_id: int,
    idents: Mapping[int, Identity],
) -> list[CulpritShare]:
    """``shares`` of the victim ``cgroup_id``'s blame ``sums`` with the blame key and
    identity a finding needs to name each (the victim itself: ``self``)."""
    first_key: dict[NamedCulprit, CulpritKey] = {}
    for key in sums:
        first_key.setdefault(classify_culprit(key, idents), key)
    out = []
    for b in shares:
        key = first_key[b.culprit]
        kind = str(b.culprit.kind)
        if key == cgroup_id:
            kind = CULPRIT_SELF
        ident = idents.get(key) if isinstance(key, int) else None
        if ident is None and b.culprit.kind == "kernel":
            ident = Identity(cgroup="/", kind=CgroupKind.ROOT)
        out.append(
            CulpritShare(
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
class WorkloadUse:
    """A workload's running containers over the window: the culprit test's usage side
    for a workload (docs/findings.md#workload-culprits)."""

    usage_cores: float | None  # sum of each running member's average use; None: none runs
    request_cores: float | None  # sum of their requests; None: none of them has one

    def entitled(self) -> bool:
        """Inside its requests: used no more than the sum of what its members request."""
        u, r = self.usage_cores, self.request_cores
        return u is not None and r is not None and r > 0 and u <= r


def workload_use(
    window: Window,
    namespace: str,
    workload: str,
    clock: Clock,
    th: Thresholds,
    gone_after: float | None = None,
) -> WorkloadUse:
    """The workload's containers that are still tracked, and with ``gone_after`` (the
    start of the minute before an earlier boundary) the members found gone after it,
    which ran in that minute (the rules: the members with a series in it,
    ``present_over_time(...[1m] offset <k>m)``): each
    one's usage as :func:`cpu_usage_cores` (over the part of the window it was
    watched), summed, and the requests of those with a usage, summed. A member without
    a request adds none. Without ``gone_after`` a gone member is not counted: its use
    over the whole window is not known."""
    usage: float | None = None
    request: float | None = None
    members = list(window.containers.values())
    if gone_after is not None:
        members += [
            d for d in window.departed.values() if d.gone_at is not None and d.gone_at > gone_after
        ]
    for cw in members:
        i = cw.identity
        if i.workload != workload or i.namespace != namespace:
            continue
        u = cpu_usage_cores(folds_in(cw, clock.window), th)
        if u is None:
            continue
        usage = u if usage is None else usage + u
        if i.cpu_request_cores is not None:
            r = i.cpu_request_cores
            request = r if request is None else request + r
    return WorkloadUse(usage, request)


@dataclass(frozen=True, slots=True)
class MemberUse:
    """A workload's members one by one over the window, gone ones included: what sizes
    its requests when none of its running containers has a measured use yet (a replica
    younger than two sampler passes; docs/findings.md#workload-culprits)."""

    running: int  # its containers tracked now, measured or not
    uses: tuple[float, ...]  # each member's own use, running or gone, where measured
    requests: tuple[float, ...] = ()  # the requests of those of them with one

    @property
    def mean(self) -> float | None:
        """The average of the members' uses, as ``sum(...) / count(...)`` (not PromQL's
        ``avg``, whose running mean can differ in the last bit); None: none measured."""
        return sum(self.uses) / len(self.uses) if self.uses else None

    @property
    def mean_request(self) -> float | None:
        """Their requests over the same count (a member without one adds none); None:
        none of them has one."""
        return sum(self.requests) / len(self.uses) if self.requests else None

    def within(self) -> bool:
        """They used no more than they request, on average (as ``WorkloadUse.entitled``):
        requests sized at their use would be no higher than theirs."""
        u, r = self.mean, self.mean_request
        return u is not None and r is not None and r > 0 and u <= r


def member_uses(
    window: Window, namespace: str, workload: str, clock: Clock, th: Thresholds
) -> MemberUse:
    """How many of the workload's containers run now, and each member's use over the
    part of the window it was watched (:func:`cpu_usage_cores`), the gone members the
    window still reaches (``Window.departed``) included, and the requests of those
    measured: per series in the rules, ``rate(usage[w]) / rate(sampled[w])``, which a
    gone series keeps while the window holds two of its samples."""
    running = 0
    uses: list[float] = []
    requests: list[float] = []
    for cw in (*window.containers.values(), *window.departed.values()):
        i = cw.identity
        if i.workload != workload or i.namespace != namespace:
            continue
        if cw.gone_at is None:
            running += 1
        u = cpu_usage_cores(folds_in(cw, clock.window), th)
        if u is None:
            continue
        uses.append(u)
        if i.cpu_request_cores is not None:
            requests.append(i.cpu_request_cores)
    return MemberUse(running, tuple(uses), tuple(requests))


@dataclass(frozen=True, slots=True)
class Overage:
    cgroup_id: int
    identity: Identity
    bytes: int  # beyond its request in the latest minute
    share: float | None  # of the node's total overage
    growth: int = 0  # how much ``bytes`` grew over the window (never negative)
    growth_share: float | None = None  # ``growth`` over the node's total overage


def memory_overages(window: Window, now: float, th: Thresholds) -> list[Overage]:
    """Each tracked container's working set beyond its memory request (all of it when it
    has no request) in the latest minute, its share of the node's total overage, and how
    much it grew over the window: the latest minute's overage minus the first window
    minute's (zero before the container was seen: it grew from nothing), never negative,
    as ``clamp_min(over_request - over_request offset <window-1>m, 0)``. The
    memory-pressure culprit heuristic (docs/findings.md#memory-pressure) names the one
    that grew most; largest growth first (ties: larger overage, then cgroup path)."""
    clock = Clock.at(now, th, window)
    rows: list[tuple[int, Identity, int, int]] = []
    for cid, cw in window.containers.items():
        fs = folds_in(cw, (clock.latest,))
        if not fs or fs[0].working_set_bytes is None:
            continue
        req = cw.identity.memory_request_bytes
        over = _beyond(fs[0].working_set_bytes, req)
        first = folds_in(cw, clock.window[:1])
        was = first[0].working_set_bytes if first else None
        then = _beyond(was, req) if was is not None else 0
        rows.append((cid, cw.identity, over, max(over - then, 0)))
    total = sum(r[2] for r in rows)
    out = [
        Overage(
            cid, ident, b, b / total if total > 0 else None, g, g / total if total > 0 else None
        )
        for cid, ident, b, g in rows
    ]
    out.sort(key=lambda o: (-o.growth, -o.bytes, o.identity.cgroup))
    return out


MEM_CULPRIT_GROWTH = "growth"  # named for its growth over the window
MEM_CULPRIT_OVERAGE = "overage"  # nothing grew that much: named for its overage


def memory_culprit(overages: list[Overage], th: Thresholds) -> tuple[Overage | None, str | None]:
    """The memory-pressure heuristic culprit (docs/findings.md#memory-pressure) and why:
    the container that grew most beyond its request over the window, if that growth is
    at least memCulpritShare of the node's overage (``growth``); else, when nothing
    grew that much, the container with the largest overage, if it holds at least
    memCulpritShare of it (``overage``). ``overages``: :func:`memory_overages`."""
    x = th.mem_culprit_share
    if overages and overages[0].growth_share is not None and overages[0].growth_share >= x:
        return overages[0], MEM_CULPRIT_GROWTH
    top = min(overages, key=lambda o: (-(o.share or 0.0), o.identity.cgroup), default=None)
    if top is not None and top.share is not None and top.share >= x:
        return top, MEM_CULPRIT_OVERAGE
    return None, None


def _beyond(working_set: int, request: int | None) -> int:
    return max(working_set - request, 0) if request is not None else working_set
