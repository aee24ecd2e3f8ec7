"""Cgroups that went away, remembered while their blame still counts in the window.

A victim's blame names its culprits by cgroup id. A culprit whose container was
replaced (a crash loop, batch work, short CronJob pods) is gone from the next pass,
but the wait it caused stays in the victim's minutes for the whole window: without its
name that wait would read ``unknown`` (docs/probe.md, "Culprits that come and go").
So the sampler hands every cgroup that disappears (and its sub-cgroups' owner) to
:class:`Departed`, which names it until no minute it could have been blamed in is left
in the window. Pure bookkeeping on plain data.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..identity import Identity

# Bound on remembered cgroups: a node replacing a container every second for the
# retention time stays well inside it; beyond it the oldest are forgotten first.
MAX_DEPARTED = 20_000


class Departed:
    """Identities (and sub-cgroup owners) of cgroups seen in an earlier pass, kept for
    ``retain_s`` seconds after the last pass that saw them."""

    def __init__(self, retain_s: float, limit: int = MAX_DEPARTED) -> None:
        self.retain_s = retain_s
        self.limit = limit
        self._prev: dict[int, Identity] = {}
        self._prev_owned: dict[int, int] = {}
        # id -> (identity, when last seen); insertion order = departure order
        self._gone: dict[int, tuple[Identity, float]] = {}
        self._gone_owned: dict[int, tuple[int, float]] = {}
        self._last_at: float | None = None

    @staticmethod
    def retention_s(window_minutes: int, interval_s: float) -> float:
        """How long a departed culprit can still be blamed in the window: its last wait
        is folded by the pass after its last sighting, into that pass's minute; that
        minute stays in the window for ``window_minutes`` more minutes, plus one while
        the evaluator still counts the minute before a boundary (docs/findings.md)."""
        return (window_minutes + 2) * 60.0 + interval_s

    def update(self, names: Mapping[int, Identity], owned: Mapping[int, int], now: float) -> None:
        """One pass: ``names`` are the cgroups this pass can name, ``owned`` the
        sub-cgroups of tracked ones. What the previous pass had and this one lacks
        departed at the previous pass's time."""
        seen_at = self._last_at if self._last_at is not None else now
        for cid, ident in self._prev.items():
            if cid not in names:
                self._gone.pop(cid, None)
                self._gone[cid] = (ident, seen_at)
        for cid, owner in self._prev_owned.items():
            if cid not in owned:
                self._gone_owned.pop(cid, None)
                self._gone_owned[cid] = (owner, seen_at)
        for cid in names:  # back again (the id is live): the live name wins
            self._gone.pop(cid, None)
        for cid in owned:
            self._gone_owned.pop(cid, None)
        self._expire(now)
        self._prev, self._prev_owned, self._last_at = dict(names), dict(owned), now

    def _expire(self, now: float) -> None:
        for table in (self._gone, self._gone_owned):
            stale = [cid for cid, (_, at) in table.items() if now - at > self.retain_s]
            for cid in stale:
                del table[cid]
            while len(table) > self.limit:  # oldest departures first
                del table[next(iter(table))]

    def names(self) -> dict[int, Identity]:
        """Departed cgroups that may still be blamed: id -> identity when last seen."""
        return {cid: ident for cid, (ident, _) in self._gone.items()}

    def owned(self) -> dict[int, int]:
        """Departed sub-cgroups -> the owner they belonged to."""
        return {cid: owner for cid, (owner, _) in self._gone_owned.items()}
