"""Histogram maths of the scheduler probe (no kernel)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from exporter.probe import RUNQ_BOUNDS_S, RUNQ_SLOTS, cumulative_buckets
from exporter.probe.backend import ProbeKnobs
from exporter.probe.bcc import cflags
from exporter.probe.decode import KNOBS, RUNQ_MAX_BOUNDS, pack_knobs
from exporter.probe.histogram import (
    bounds_ns,
    count_le,
    estimate_quantile,
    le_label,
    slot_for,
)


def prom_bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' bucketQuantile (promql/quantile.go), transcribed for reference."""
    assert buckets[-1][0] == math.inf
    observations = buckets[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i in range(len(buckets) - 1) if buckets[i][1] >= rank), len(buckets) - 1)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    return start + (end - start) * (rank / count)


def as_prom(counts: list[int]) -> list[tuple[float, float]]:
    return [
        (math.inf if le == "+Inf" else float(le), float(c)) for le, c in cumulative_buckets(counts)
    ]


def test_bounds_contain_the_decision_thresholds_exactly() -> None:
    assert 0.02 in RUNQ_BOUNDS_S
    assert 0.2 in RUNQ_BOUNDS_S
    ns = bounds_ns()
    assert 20_000_000 in ns and 200_000_000 in ns
    assert list(ns) == sorted(set(ns))
    assert len(RUNQ_BOUNDS_S) + 1 == RUNQ_SLOTS
    assert all(math.isfinite(b) for b in RUNQ_BOUNDS_S)


@pytest.mark.parametrize(
    "bad", [(), (0.01, 0.01), (0.02, 0.01), (0.0,), (math.inf,), (1e-10,), (1.5e-9,)]
)
def test_bad_bounds_are_rejected(bad: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        bounds_ns(bad)


def test_cflags_carry_the_same_bounds() -> None:
    """BCC gets the Python bounds as -D cflags..."""
    flags = cflags(ProbeKnobs(min_wait_us=75), Path("/x"))
    joined = " ".join(flags)
    assert f"-DRUNQ_NBOUNDS={len(RUNQ_BOUNDS_S)}" in flags
    bounds_flag = next(f for f in flags if f.startswith("-DRUNQ_BOUNDS_NS="))
    values = [int(v.removesuffix("ULL")) for v in bounds_flag.split("=", 1)[1].split(",")]
    assert tuple(values) == bounds_ns()
    assert "-DATTR_OCCUPANCY=1" in flags
    assert "-DMIN_WAIT_NS=75000ULL" in flags
    assert "-I/x" in joined
    last = cflags(ProbeKnobs(attribution="last-runner"), Path("/x"))
    assert "-DATTR_OCCUPANCY=0" in last


def test_core_knobs_carry_the_same_bounds() -> None:
    """...and the CO-RE object the same numbers in its read-only knobs."""
    raw = pack_knobs(bounds_ns(), 75_000, 32, 65536, True, True, False)
    vals = KNOBS.unpack(raw)
    n = len(RUNQ_BOUNDS_S)
    assert tuple(vals[:n]) == bounds_ns() and all(v == 0 for v in vals[n:RUNQ_MAX_BOUNDS])
    min_wait, nbounds, ring_mask, max_pids, occ, has_state, ktime, burst, pad = vals[
        RUNQ_MAX_BOUNDS:
    ]
    assert (min_wait, nbounds, ring_mask, max_pids) == (75_000, n, 31, 65536)
    assert (occ, has_state, ktime, burst, pad) == (1, 1, 0, 1, 0)
    off = KNOBS.unpack(pack_knobs(bounds_ns(), 0, 32, 1, True, True, False, burst=False))
    assert off[RUNQ_MAX_BOUNDS + 7] == 0
    with pytest.raises(ValueError):
        pack_knobs(tuple(range(1, RUNQ_MAX_BOUNDS + 2)), 0, 32, 1, True, True, False)


def test_slot_boundaries_are_inclusive_upper_bounds() -> None:
    i20 = RUNQ_BOUNDS_S.index(0.02)
    first, top = RUNQ_BOUNDS_S[0], RUNQ_BOUNDS_S[-1]
    assert slot_for(0.0) == 0
    assert slot_for(first) == 0
    assert slot_for(first + 1e-9) == 1
    assert slot_for(0.02) == i20
    assert slot_for(0.020000001) == i20 + 1
    assert slot_for(top) == len(RUNQ_BOUNDS_S) - 1
    assert slot_for(top + 1e-9) == len(RUNQ_BOUNDS_S)  # overflow
    assert slot_for(3600.0) == len(RUNQ_BOUNDS_S)


def test_cumulative_buckets_backfill_and_inf_last() -> None:
    counts = [0] * RUNQ_SLOTS
    counts[0] = 3
    counts[RUNQ_BOUNDS_S.index(0.02)] = 2
    counts[-1] = 1  # overflow: a multi-second wait
    out = cumulative_buckets(counts)
    assert len(out) == RUNQ_SLOTS
    assert out[-1] == ("+Inf", 6)
    assert [le for le, _ in out[:-1]] == [le_label(b) for b in RUNQ_BOUNDS_S]
    cum = [c for _, c in out]
    assert cum == sorted(cum)  # monotonic
    assert dict(out)["0.005"] == 3  # backfilled: empty slots carry the running total
    assert dict(out)["0.02"] == 5
    assert dict(out)["0.05"] == 5
    assert dict(out)["1.0"] == 5  # the overflow event has no finite bucket
    assert le_label(1.0) == "1.0" and le_label(0.00025) == "0.00025"


def test_the_bounds_keep_the_decision_thresholds_and_the_budget() -> None:
    """0.02 and 0.2 are exact bounds (the findings' thresholds); five bounds keep a
    victim's histogram at 8 series (docs/metrics.md, "Cardinality")."""
    assert 0.02 in RUNQ_BOUNDS_S and 0.2 in RUNQ_BOUNDS_S
    assert RUNQ_SLOTS + 2 == 8  # buckets with +Inf, _count, _sum


def test_cumulative_buckets_validate() -> None:
    with pytest.raises(ValueError):
        cumulative_buckets([1, 2, 3])
    with pytest.raises(ValueError):
        cumulative_buckets([-1] + [0] * (RUNQ_SLOTS - 1))
    assert cumulative_buckets([0] * RUNQ_SLOTS)[-1] == ("+Inf", 0)


def test_count_le_needs_a_real_bound() -> None:
    counts = [1] * RUNQ_SLOTS
    assert count_le(counts, 0.02) == RUNQ_BOUNDS_S.index(0.02) + 1
    with pytest.raises(ValueError):
        count_le(counts, 0.03)


def test_estimate_quantile_agrees_with_promql() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        counts = [rng.choice([0, 0, 0, 1, 2, 5, 50]) for _ in range(RUNQ_SLOTS)]
        if sum(counts) == 0:
            continue
        q = rng.choice([0.5, 0.9, 0.95, 0.99])
        prom = prom_bucket_quantile(q, as_prom(counts))
        assert estimate_quantile(counts, q) == pytest.approx(prom, rel=1e-9, abs=1e-12)


def test_estimate_quantile_none_without_events() -> None:
    assert estimate_quantile([0] * RUNQ_SLOTS, 0.99) is None
