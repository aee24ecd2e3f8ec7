"""Burst demand's Python side (exporter/probe/burst.py): the maths over its buckets,
the fold into the window's minutes, and the exported histogram. The kernel's count is
tested on the real kernel (tests/integration/test_probe_burst_kernel.py)."""

from __future__ import annotations

import math

import pytest

from exporter.catalog.probe import RUNNABLE_THREADS
from exporter.cgroupfs.discovery import CgroupKind
from exporter.exposition.probe import VictimProbeData, build_probe_families
from exporter.identity import Identity
from exporter.probe import ProbeDelta, ProbeStatus, ProbeTotals, RunqDelta, RunqHistogram
from exporter.probe.burst import (
    BURST_BOUNDS,
    BURST_SLOTS,
    peak_threads,
    share_above,
    threads_quantile,
    window_burst,
)
from exporter.probe.fold import ProbeFolds
from exporter.probe.histogram import RUNQ_SLOTS
from exporter.window.model import MinuteFold


def counts(**at: int) -> list[int]:
    """Burst buckets with ``n<threads>=observations`` (``over`` for the overflow)."""
    out = [0] * BURST_SLOTS
    for key, n in at.items():
        out[BURST_SLOTS - 1 if key == "over" else BURST_BOUNDS.index(int(key[1:]))] += n
    return out


def test_quantile_share_and_peak_read_the_buckets_as_promql_does() -> None:
    c = counts(n1=10, n4=80, n8=10)
    # histogram_quantile: rank 50 of 100 lies in (3, 4], 40 of its 80 -> 3.5
    assert threads_quantile(c, 0.5) == pytest.approx(3.5)
    assert threads_quantile(c, 0.95) == pytest.approx(6 + 2 * 0.5)  # (6, 8], half-way
    assert share_above(c, 4) == pytest.approx(0.1)
    assert share_above(c, 1) == pytest.approx(0.9)
    assert share_above(c, 32) == 0.0
    assert peak_threads(c) == 8.0
    assert peak_threads(counts(n2=1, over=1)) == math.inf
    assert threads_quantile(counts(over=5), 0.5) == 32.0  # the largest finite bound
    empty = counts()
    assert threads_quantile(empty, 0.5) is None and share_above(empty, 4) is None
    assert peak_threads(empty) is None


def test_bad_input_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a burst bucket bound"):
        share_above(counts(n1=1), 5)
    with pytest.raises(ValueError, match="expected 11 burst bucket counts"):
        threads_quantile([1, 2], 0.5)
    with pytest.raises(ValueError, match="negative"):
        peak_threads([-1] + [0] * (BURST_SLOTS - 1))


def test_window_burst_sums_minutes_and_none_is_not_measured() -> None:
    folds = [
        MinuteFold(minute=0, burst_buckets=counts(n2=3)),
        MinuteFold(minute=60),  # not measured: skipped, not a zero
        MinuteFold(minute=120, burst_buckets=counts(n2=1, n16=2)),
    ]
    assert window_burst(folds) == counts(n2=4, n16=2)
    assert window_burst([MinuteFold(minute=0)]) is None
    assert window_burst([MinuteFold(minute=0, burst_buckets=counts())]) == counts()


class OnePoll:
    """The probe as a pass sees it, with one prepared delta."""

    loaded = True
    status = ProbeStatus(True, "", "", "occupancy", loader="core")

    def __init__(self, delta: ProbeDelta) -> None:
        self.delta = delta

    def set_tracked(self, ids: set[int]) -> None:
        pass

    def poll(self) -> ProbeDelta:
        return self.delta

    def prune(self, live_ids: set[int]) -> int:
        return 0

    def totals(self) -> ProbeTotals:
        return ProbeTotals()

    def close(self) -> None:
        pass


def test_a_pass_folds_burst_into_the_owners_minute() -> None:
    owner, sub, quiet = 100, 101, 200
    delta = ProbeDelta(interval_s=5.0, burst_measured=True)
    delta.runq[owner] = RunqDelta([1] * RUNQ_SLOTS, 0.1, counts(n4=7), 28)
    delta.runq[sub] = RunqDelta([0] * RUNQ_SLOTS, 0.0, counts(n1=2), 2)
    current = {cid: MinuteFold(minute=0) for cid in (owner, quiet)}
    folds = ProbeFolds(OnePoll(delta))
    snap = folds.pass_({owner, quiet}, {sub: owner}, {owner, sub, quiet}, current, 1)
    assert snap.burst_measured
    # a sub-cgroup's observations are its owner's (each counts its own tasks)
    assert current[owner].burst_buckets == counts(n1=2, n4=7)
    assert current[quiet].burst_buckets == counts()  # measured, nothing observed
    h = snap.runq[owner]
    assert h.burst == counts(n1=2, n4=7) and h.burst_sum == 30

    off = ProbeDelta(interval_s=5.0)  # the burst knob off: not measured, never zeros
    off.runq[owner] = RunqDelta([1] * RUNQ_SLOTS, 0.1)
    current = {owner: MinuteFold(minute=60)}
    snap = ProbeFolds(OnePoll(off)).pass_({owner}, {}, {owner}, current, 1)
    assert not snap.burst_measured and current[owner].burst_buckets is None


def test_the_exported_histogram_is_cumulative_with_every_bound() -> None:
    ident = Identity(cgroup="/system.slice/app.service", kind=CgroupKind.SYSTEM)
    h = RunqHistogram(burst=counts(n1=2, n4=7, over=1), burst_sum=70)
    v = VictimProbeData(identity=ident, runq=h, blame_window_s={}, cgroup_id=100)
    status = ProbeStatus(True, "", "", "occupancy", loader="core")
    fams = build_probe_families([v], {}, status, None, burst=True)
    (fam,) = [f for f in fams if f.name == RUNNABLE_THREADS.name]
    buckets = {s.labels["le"]: s.value for s in fam.samples if s.name.endswith("_bucket")}
    assert list(buckets) == [*(f"{float(b)}" for b in BURST_BOUNDS), "+Inf"]
    assert buckets["1.0"] == 2 and buckets["3.0"] == 2 and buckets["4.0"] == 9
    assert buckets["32.0"] == 9 and buckets["+Inf"] == 10
    (total,) = [s.value for s in fam.samples if s.name.endswith("_sum")]
    assert total == 70
    without = build_probe_families([v], {}, status, None, burst=False)
    assert RUNNABLE_THREADS.name not in {f.name for f in without}
