"""Run-queue latency histogram: the bucket bounds (single source of truth) and maths.

The BPF program counts waits per bucket, *not* cumulatively: slot ``i`` holds waits
``w`` with ``bound[i-1] < w <= bound[i]`` (the first slot starts at 0), and the last
slot holds everything above the largest bound (the overflow bucket, which never gets a
finite bound). The loader passes these bounds to the C code as ``-D`` cflags in
nanoseconds, so the kernel and Python cannot disagree.

The decision thresholds of the findings (20 ms and 200 ms) are exact bounds, so
"p99 >= 20 ms" is decided from bucket counts, never interpolated: the evaluator
(``findings.signals``) and the rules make the same rank test on them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

# Finite upper bounds in seconds (ascending). 0.02 and 0.2 are the decision thresholds
# (runqP99Ms, criticalRunqP99Ms); 5 ms below them separates a healthy run queue from a
# slow one, 50 ms halves the decade between them, and a wait above 1 s, the overflow
# bucket, always counts as a stall. Five bounds keep a victim's histogram at 8 series
# (docs/metrics.md, "Cardinality"): every threshold must be one of them.
RUNQ_BOUNDS_S: tuple[float, ...] = (0.005, 0.02, 0.05, 0.2, 1.0)
RUNQ_SLOTS = len(RUNQ_BOUNDS_S) + 1  # + the overflow bucket
INF_LE = "+Inf"


def bounds_ns(bounds_s: Sequence[float] = RUNQ_BOUNDS_S) -> tuple[int, ...]:
    """The bounds in whole nanoseconds, as the kernel compares them; validated."""
    if not bounds_s:
        raise ValueError("at least one finite bound is needed")
    if not all(math.isfinite(b) for b in bounds_s):
        raise ValueError("bucket bounds must be finite (the overflow bucket is implicit)")
    out = tuple(round(b * 1e9) for b in bounds_s)
    for b_s, b_ns in zip(bounds_s, out, strict=True):
        if b_ns <= 0:
            raise ValueError(f"bucket bound {b_s!r} must be finite and >= 1 ns")
        if abs(b_ns - b_s * 1e9) > 1e-3:
            raise ValueError(f"bucket bound {b_s!r} is not a whole number of nanoseconds")
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise ValueError("bucket bounds must be strictly ascending")
    return out


def le_label(bound_s: float) -> str:
    """A bound as Prometheus client libraries print ``le`` (Go float formatting)."""
    if math.isinf(bound_s):
        return INF_LE
    return repr(float(bound_s))


def slot_for(wait_s: float, bounds_s: Sequence[float] = RUNQ_BOUNDS_S) -> int:
    """The slot a wait falls in (what the kernel computes; for tests and replay)."""
    wait_ns = round(wait_s * 1e9)
    for i, b in enumerate(bounds_ns(bounds_s)):
        if wait_ns <= b:
            return i
    return len(bounds_s)


def _check(counts: Sequence[int], bounds_s: Sequence[float]) -> None:
    if len(counts) != len(bounds_s) + 1:
        raise ValueError(
            f"expected {len(bounds_s) + 1} bucket counts (bounds + overflow), got {len(counts)}"
        )
    if any(c < 0 for c in counts):
        raise ValueError("bucket counts must not be negative")


def cumulative_buckets(
    counts: Sequence[int], bounds_s: Sequence[float] = RUNQ_BOUNDS_S
) -> list[tuple[str, int]]:
    """Per-slot counts -> Prometheus buckets ``[(le, cumulative count), ...]``.

    Every finite bound is present (backfilled with the running total even when its own
    slot is empty) and ``"+Inf"`` comes last with the total event count.
    """
    _check(counts, bounds_s)
    out: list[tuple[str, int]] = []
    running = 0
    for bound, c in zip(bounds_s, counts, strict=False):
        running += c
        out.append((le_label(bound), running))
    running += counts[-1]
    out.append((INF_LE, running))
    return out


def count_le(
    counts: Sequence[int], bound_s: float, bounds_s: Sequence[float] = RUNQ_BOUNDS_S
) -> int:
    """Events with wait <= ``bound_s``; the bound must be one of the bucket bounds."""
    _check(counts, bounds_s)
    try:
        idx = list(bounds_s).index(bound_s)
    except ValueError:
        raise ValueError(f"{bound_s!r} is not a bucket bound") from None
    return sum(counts[: idx + 1])


def estimate_quantile(
    counts: Sequence[int], q: float, bounds_s: Sequence[float] = RUNQ_BOUNDS_S
) -> float | None:
    """The ``q``-quantile as PromQL's ``histogram_quantile`` estimates it.

    Linear interpolation inside the bucket (the first bucket starts at 0); a rank in
    the overflow bucket returns the largest finite bound. None when there are no events.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be in [0, 1]")
    _check(counts, bounds_s)
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    running = 0
    lower = 0.0
    for bound, c in zip(bounds_s, counts, strict=False):
        if running + c >= rank and c > 0:
            return lower + (bound - lower) * (rank - running) / c
        running += c
        lower = bound
    return float(bounds_s[-1])
