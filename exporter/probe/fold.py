"""The probe's part of a sampler pass: poll its deltas and fold them into the window.

Victims are the tracked cgroups and their sub-cgroups (the probe sees tasks in the
leaf cgroup they run in); both sides of the blame matrix are mapped to the tracked
owner, so a task in ``unit.service/sub`` is counted as (and blamed on)
``unit.service``. Self-wait is kept: it is evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..window.model import MinuteFold
from .decode import BURST_SLOTS
from .histogram import RUNQ_SLOTS
from .model import ProbeDelta, ProbeTotals, RunqHistogram
from .status import ProbeStatus

PRUNE_EVERY_PASSES = 12  # forget dead cgroups' kernel entries about once a minute


class Probe(Protocol):
    """What a pass needs from the scheduler probe (``SchedProbe``)."""

    @property
    def loaded(self) -> bool: ...

    @property
    def status(self) -> ProbeStatus: ...

    def set_tracked(self, ids: set[int]) -> None: ...

    def poll(self) -> ProbeDelta: ...

    def prune(self, live_ids: set[int]) -> int: ...

    def totals(self) -> ProbeTotals: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ProbeSnapshot:
    """The scheduler probe's part of a pass (cumulative; keyed by tracked cgroup id)."""

    status: ProbeStatus
    totals: ProbeTotals
    runq: dict[int, RunqHistogram]
    # culprit cgroup id -> run-queue wait it caused to other tracked victims since the
    # exporter started (contention_antagonist_wait_seconds_total; docs/metrics.md)
    caused: dict[int, float] = field(default_factory=dict)
    # the kernel counts burst demand (RunqHistogram.burst is measured, not just zeros)
    burst_measured: bool = False


class ProbeFolds:
    """Per tracked owner, the cumulative run-queue histogram, summed from the probe's
    deltas (not from its per-key totals, which drop a dead sub-cgroup's history and
    would make the owner's counter go backwards); per culprit cgroup, the cumulative
    wait it caused to the tracked victims other than itself."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self._hists: dict[int, RunqHistogram] = {}
        self._caused: dict[int, float] = {}

    def pass_(
        self,
        live: set[int],
        owned: Mapping[int, int],
        all_ids: set[int],
        current: Mapping[int, MinuteFold],
        pass_number: int,
    ) -> ProbeSnapshot:
        """Poll the probe and fold its deltas into ``current`` (each tracked cgroup's
        minute in progress). ``owned``: sub-cgroup id -> tracked owner id;
        ``all_ids``: every cgroup that exists (for pruning the kernel maps)."""
        probe = self.probe
        if probe.loaded:
            probe.set_tracked(live | {d for d, o in owned.items() if o in live})
        delta = probe.poll()

        def own(key: int) -> int:
            return owned.get(key, key)

        if probe.loaded:
            _zero_when_loaded(live, current, delta.burst_measured)
        _fold_runq(delta, current, own)
        _fold_blame(delta, current, own)
        if probe.loaded and pass_number % PRUNE_EVERY_PASSES == 0:
            probe.prune(all_ids)
        self._cumulate(delta, live, own)
        self._cumulate_caused(delta, live, all_ids, own)
        runq = {cid: h.copy() for cid, h in self._hists.items()}
        return ProbeSnapshot(
            status=probe.status,
            totals=probe.totals(),
            runq=runq,
            caused=dict(self._caused),
            burst_measured=probe.loaded and delta.burst_measured,
        )

    def _cumulate(self, delta: ProbeDelta, live: set[int], own: Callable[[int], int]) -> None:
        hists = self._hists
        for vid, rd in delta.runq.items():
            owner = own(vid)
            if owner not in live:
                continue
            hist = hists.get(owner)
            if hist is None:
                hist = hists[owner] = RunqHistogram()
            hist.add(rd)
        for gone in [cid for cid in hists if cid not in live]:
            del hists[gone]

    def _cumulate_caused(
        self, delta: ProbeDelta, live: set[int], all_ids: set[int], own: Callable[[int], int]
    ) -> None:
        """Add each culprit cgroup's share of this poll's waits of the tracked victims,
        its own wait excluded (its tasks queued behind each other). Idle and
        unattributed wait are nobody's. A counter only ever grows while its cgroup
        exists; it is forgotten when the cgroup is removed (nothing can add to it)."""
        caused = self._caused
        for vid, row in delta.blame.items():
            victim = own(vid)
            if victim not in live:
                continue
            for key, cell in row.items():
                if not isinstance(key, int) or cell.wait_s <= 0:
                    continue
                culprit = own(key)
                if culprit != victim:
                    caused[culprit] = caused.get(culprit, 0.0) + cell.wait_s
        if all_ids:
            for gone in [c for c in caused if c not in all_ids and c not in live]:
                del caused[gone]


def _zero_when_loaded(live: set[int], current: Mapping[int, MinuteFold], burst: bool) -> None:
    """Loaded but no waits yet is "zero", not "not measured" (burst demand too, when
    the probe counts it)."""
    for cid in live:
        fold = current.get(cid)
        if fold is None:
            continue
        if fold.runq_buckets is None:
            fold.runq_buckets = [0] * RUNQ_SLOTS
            fold.runq_sum_s = 0.0
            fold.blame_s = {}
        if burst and fold.burst_buckets is None:
            fold.burst_buckets = [0] * BURST_SLOTS


def _fold_runq(
    delta: ProbeDelta, current: Mapping[int, MinuteFold], own: Callable[[int], int]
) -> None:
    for vid, rd in delta.runq.items():
        fold = current.get(own(vid))
        if fold is None:
            continue
        buckets = fold.runq_buckets
        if buckets is None:
            buckets = fold.runq_buckets = [0] * len(rd.counts)
        for i, n in enumerate(rd.counts):
            buckets[i] += n
        fold.runq_sum_s = (fold.runq_sum_s or 0.0) + rd.sum_s
        # A sub-cgroup's observations count its own threads only (docs/probe.md).
        burst = fold.burst_buckets
        if burst is not None:
            for i, n in enumerate(rd.burst):
                burst[i] += n


def _fold_blame(
    delta: ProbeDelta, current: Mapping[int, MinuteFold], own: Callable[[int], int]
) -> None:
    for vid, row in delta.blame.items():
        fold = current.get(own(vid))
        if fold is None:
            continue
        blame = fold.blame_s if fold.blame_s is not None else {}
        fold.blame_s = blame
        for key, cell in row.items():
            k = own(key) if isinstance(key, int) else key
            blame[k] = blame.get(k, 0.0) + cell.wait_s
