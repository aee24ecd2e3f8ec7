"""Burst demand: how many of a container's threads want a CPU at once (docs/probe.md,
"Burst demand").

The kernel keeps, per tracked cgroup, a live count of its tasks that are running or
runnable (on a CPU or queued for one, throttled ones included), and each time one of
its tasks is put on a run queue (woken, created, or switched out still runnable) the
count then, itself included, is one observation in a fixed-bucket histogram. So the
distribution is per event, not per second: "when its threads wanted a CPU, how many
wanted one at once". N busy threads give N; one thread gives 1.

Bucket ``i`` holds observations ``n`` with ``BURST_BOUNDS[i-1] < n <= BURST_BOUNDS[i]``,
the last one everything above the largest bound. The kernel's bounds are
``bpf/sched_probe.h``'s BURST_BOUNDS_LIST (tests/unit/test_probe_decode.py checks they
agree). The maths here reads the same buckets as PromQL does the exported histogram
(``contention_runnable_threads``, catalog ``probe.RUNNABLE_THREADS``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..catalog.probe import RUNNABLE_THREADS, RUNQUEUE_LATENCY_SECONDS
from ..window.model import MinuteFold
from .decode import BURST_NBOUNDS, BURST_SLOTS
from .histogram import RUNQ_BOUNDS_S, estimate_quantile

BURST_BOUNDS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
BURST_BOUNDS_F: tuple[float, ...] = tuple(float(b) for b in BURST_BOUNDS)
assert len(BURST_BOUNDS) == BURST_NBOUNDS and BURST_SLOTS == BURST_NBOUNDS + 1

# Finite bounds of each histogram family the probe exports (the series budget:
# exporter/catalog/budget.py).
HISTOGRAM_BOUNDS: dict[str, int] = {
    RUNQUEUE_LATENCY_SECONDS.name: len(RUNQ_BOUNDS_S),
    RUNNABLE_THREADS.name: BURST_NBOUNDS,
}

__all__ = [
    "BURST_BOUNDS",
    "BURST_BOUNDS_F",
    "BURST_SLOTS",
    "HISTOGRAM_BOUNDS",
    "peak_threads",
    "share_above",
    "threads_quantile",
    "window_burst",
]


def _check(counts: Sequence[int]) -> None:
    if len(counts) != BURST_SLOTS:
        raise ValueError(f"expected {BURST_SLOTS} burst bucket counts, got {len(counts)}")
    if any(c < 0 for c in counts):
        raise ValueError("burst bucket counts must not be negative")


def window_burst(folds: Iterable[MinuteFold]) -> list[int] | None:
    """The burst buckets summed over ``folds`` (e.g. a window's complete minutes).
    None when no minute has burst data (the probe not loaded, or its burst count off);
    zeros when it was measured and nothing was observed."""
    total: list[int] | None = None
    for f in folds:
        b = f.burst_buckets
        if b is None:
            continue
        _check(b)
        if total is None:
            total = [0] * BURST_SLOTS
        for i, n in enumerate(b):
            total[i] += n
    return total


def threads_quantile(counts: Sequence[int], q: float) -> float | None:
    """The ``q``-quantile of the observed thread counts, as PromQL's
    ``histogram_quantile(q, ...)`` estimates it from these buckets (linear inside a
    bucket from the bound below; a rank in the overflow bucket gives 32). None when
    there are no observations."""
    _check(counts)
    return estimate_quantile(counts, q, BURST_BOUNDS_F)


def share_above(counts: Sequence[int], threads: int) -> float | None:
    """The share of observations with more than ``threads`` threads running or
    runnable. ``threads`` must be one of BURST_BOUNDS (so the answer is exact, and
    PromQL gets it from two bucket series). None when there are no observations."""
    _check(counts)
    if threads not in BURST_BOUNDS:
        raise ValueError(f"{threads!r} is not a burst bucket bound {BURST_BOUNDS}")
    total = sum(counts)
    if total == 0:
        return None
    at_most = sum(counts[: BURST_BOUNDS.index(threads) + 1])
    return (total - at_most) / total


def peak_threads(counts: Sequence[int]) -> float | None:
    """The upper bound of the highest bucket with observations (1.0 .. 32.0),
    ``math.inf`` when some observation had more than 32; None when there are none."""
    _check(counts)
    for i in range(BURST_SLOTS - 1, -1, -1):
        if counts[i] > 0:
            return BURST_BOUNDS_F[i] if i < BURST_NBOUNDS else math.inf
    return None
