"""Blame shares: a victim's run-queue wait split among its culprits (pure).

``contention_blame_share`` exports these numbers and the finding evaluator decides on
the same ones, so the rules and the evaluator test the same values.
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
    top_k: int | None = DEFAULT_TOP_K,
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> list[BlameShare]:
    """Culprits of one victim, largest share first (ties by name), at most ``top_k``.

    Keys that name the same culprit (several unknown ids, say) are merged first, so no
    two entries carry the same labels. Shares are of *all* the victim's wait (idle and
    unattributed included), so the top-K shares need not sum to 1.
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
    if top_k is not None:
        ranked = ranked[:top_k]
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
