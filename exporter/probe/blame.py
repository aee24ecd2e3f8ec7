"""Blame shares: a victim's run-queue wait split among its culprits (pure).

``contention_blame_ratio`` and ``contention_workload_blame_ratio`` export these
numbers for the culprits :func:`top_culprits` picks, and the finding evaluator judges
the same culprits on the same numbers, so the rules and the evaluator test the same
values.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ..identity import Identity
from ..window.model import CulpritKey
from .culprit import ROOT_CGROUP_ID, CulpritKind, NamedCulprit, classify_culprit

DEFAULT_TOP_K = 3


@dataclass(frozen=True, slots=True)
class BlameShare:
    culprit: NamedCulprit
    share: float  # of the victim's total wait in the window (0-1)
    wait_s: float


def blame_shares(
    blame_window_s: Mapping[CulpritKey, float],
    identities: Mapping[int, Identity],
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> list[BlameShare]:
    """Every culprit of one victim, largest share first (ties by name); which of them
    are exported and judged: :func:`top_culprits`.

    Keys that name the same culprit (several unknown ids, say) are merged first, so no
    two entries carry the same labels. Shares are of *all* the victim's wait (idle and
    unattributed included), so the top-K shares need not sum to 1. Every kind ranks:
    idle, unknown, the kernel and the victim's own cgroup too.
    """
    total = sum(w for w in blame_window_s.values() if w > 0)
    if total <= 0:
        return []
    merged: dict[NamedCulprit, float] = {}
    for key, wait in blame_window_s.items():
        if wait <= 0:
            continue
        c = classify_culprit(key, identities, root_ids)
        merged[c] = merged.get(c, 0.0) + wait
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0].culprit, kv[0].cgroup))
    return [BlameShare(c, w / total, w) for c, w in ranked]


def unknown_blame_ratio(
    blame_windows: Iterable[Mapping[CulpritKey, float]],
    identities: Mapping[int, Identity],
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> float | None:
    """Share of all victims' wait blamed on ``unknown`` (unresolved ids and wait the
    slice ring did not cover). None when there was no wait at all."""
    total = unknown = 0.0
    for row in blame_windows:
        for key, wait in row.items():
            if wait <= 0:
                continue
            total += wait
            if classify_culprit(key, identities, root_ids).kind is CulpritKind.UNKNOWN:
                unknown += wait
    return unknown / total if total > 0 else None


DEFAULT_ANTAGONIST_TOP_K = 10
ANTAGONIST_KINDS = (CulpritKind.POD, CulpritKind.SYSTEM, CulpritKind.KERNEL)


@dataclass(frozen=True, slots=True)
class Antagonist:
    """A culprit ranked across every victim of the node (docs/metrics.md)."""

    culprit: NamedCulprit
    window_s: float  # wait it caused to other victims over the blame window (the rank)
    total_s: float  # ... since the exporter started (the exported counter)


def antagonists(
    blame_by_victim: Mapping[int, Mapping[CulpritKey, float]],
    caused_total_s: Mapping[int, float],
    identities: Mapping[int, Identity],
    top_k: int = DEFAULT_ANTAGONIST_TOP_K,
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> list[Antagonist]:
    """The ``top_k`` culprits that caused the most run-queue wait to the other tracked
    victims over the window, largest first (ties by name).

    Ranked by the window (who hurts the node *now*), reported with the cumulative total
    (``caused_total_s``, which only grows while the culprit exists), so a culprit that
    leaves the top K and comes back resumes its counter where it is, never lower. Only
    nameable culprits (pod, system, kernel) rank: idle and unknown wait are nobody's,
    and a victim's wait behind its own tasks is not caused to anyone else.
    """
    window: dict[NamedCulprit, float] = {}
    for victim, row in blame_by_victim.items():
        for key, wait in row.items():
            if not isinstance(key, int) or key == victim or wait <= 0:
                continue
            c = classify_culprit(key, identities, root_ids)
            if c.kind in ANTAGONIST_KINDS:
                window[c] = window.get(c, 0.0) + wait
    total: dict[NamedCulprit, float] = {}
    for key, caused in caused_total_s.items():
        c = classify_culprit(key, identities, root_ids)
        if c in window:
            total[c] = total.get(c, 0.0) + caused
    ranked = sorted(window.items(), key=lambda kv: (-kv[1], kv[0].culprit, kv[0].cgroup))
    return [Antagonist(c, w, total[c]) for c, w in ranked if c in total][:top_k]


# culprit_kind of a workload culprit: the containers of one owner together.
WORKLOAD_KIND = "workload"
WORKLOAD_MEMBER_KINDS = (CulpritKind.POD, CulpritKind.SYSTEM)
# A workload of one blamed container is that container, already judged (and exported)
# on its own: only two or more make a workload culprit (and a series).
MIN_WORKLOAD_MEMBERS = 2


@dataclass(frozen=True, slots=True)
class WorkloadShare:
    """The containers of one workload (``Identity.workload``, within a namespace) as
    one culprit: their summed share of a victim's wait (docs/findings.md#workload-culprits)."""

    namespace: str
    workload: str  # Kind/name: Deployment/web, CronJob/backup, ...
    share: float
    wait_s: float
    members: tuple[int, ...]  # the blamed cgroup ids, live or departed, sorted

    @property
    def ref(self) -> str:
        """The ``culprit`` label: ``<namespace>/<Kind>/<name>``, or the workload alone."""
        return f"{self.namespace}/{self.workload}" if self.namespace else self.workload

    def labels(self) -> dict[str, str]:
        out = {"culprit_kind": WORKLOAD_KIND, "culprit": self.ref}
        if self.namespace:
            out["culprit_namespace"] = self.namespace
        out["culprit_workload"] = self.workload
        return out


def workload_shares(
    blame_window_s: Mapping[CulpritKey, float],
    identities: Mapping[int, Identity],
    victim_id: int,
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> list[WorkloadShare]:
    """A victim's wait behind each workload, summed over the workload's containers
    (those still running and those gone whose names are kept), for workloads with at
    least two containers in the victim's blame, largest first (ties by name); which of
    them are exported and judged: :func:`top_culprits`. Shares are of all the victim's
    wait, like :func:`blame_shares`. The victim's wait behind itself is no workload's
    (it can be one of the workload's replicas: the others still count)."""
    total = sum(w for w in blame_window_s.values() if w > 0)
    if total <= 0:
        return []
    wait: dict[tuple[str, str], float] = {}
    members: dict[tuple[str, str], list[int]] = {}
    for key, w in blame_window_s.items():
        if w <= 0 or not isinstance(key, int) or key == victim_id:
            continue
        ident = identities.get(key)
        if ident is None or not ident.workload:
            continue
        if classify_culprit(key, identities, root_ids).kind not in WORKLOAD_MEMBER_KINDS:
            continue
        g = (ident.namespace, ident.workload)
        wait[g] = wait.get(g, 0.0) + w
        members.setdefault(g, []).append(key)
    out = [
        WorkloadShare(ns, wl, s / total, s, tuple(sorted(members[(ns, wl)])))
        for (ns, wl), s in wait.items()
        if len(members[(ns, wl)]) >= MIN_WORKLOAD_MEMBERS
    ]
    out.sort(key=lambda x: (-x.wait_s, x.ref))
    return out


@dataclass(frozen=True, slots=True)
class TopCulprits:
    """A victim's ``top_k`` largest culprits, single culprits and workloads together:
    what ``contention_blame_ratio`` (``containers``) and
    ``contention_workload_blame_ratio`` (``workloads``) export, and all the evaluator
    judges. One budget of K series per victim (docs/metrics.md#cardinality)."""

    containers: tuple[BlameShare, ...]  # every kind: pod, system, kernel, idle, unknown
    workloads: tuple[WorkloadShare, ...]


def top_culprits(
    blame_window_s: Mapping[CulpritKey, float],
    identities: Mapping[int, Identity],
    victim_id: int,
    top_k: int = DEFAULT_TOP_K,
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> TopCulprits:
    """The victim's ``top_k`` largest culprits by share: the entries of
    :func:`blame_shares` (any kind, the victim's own cgroup included, as before
    workloads existed) and of :func:`workload_shares` (two or more containers) ranked
    together, ties by name (the ``culprit`` label; a single culprit before a workload
    of the same name). A workload outranks each of its members (its share is theirs
    summed), so a container can make way for its own workload."""
    ranked: list[tuple[float, str, int, str, BlameShare | WorkloadShare]] = [
        (-b.wait_s, b.culprit.culprit, 0, b.culprit.cgroup, b)
        for b in blame_shares(blame_window_s, identities, root_ids)
    ]
    ranked += [
        (-ws.wait_s, ws.ref, 1, "", ws)
        for ws in workload_shares(blame_window_s, identities, victim_id, root_ids)
    ]
    ranked.sort(key=lambda r: r[:4])
    top = [r[4] for r in ranked[:top_k]]
    return TopCulprits(
        containers=tuple(x for x in top if isinstance(x, BlameShare)),
        workloads=tuple(x for x in top if isinstance(x, WorkloadShare)),
    )
