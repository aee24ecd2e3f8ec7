"""Blame accuracy against the kernel's own CPU accounting (pure maths, unit-tested).

Truth for a victim-window: each lab culprit's CPU use from its ``cpu.stat`` over the
window, as a share of all lab culprits' use. The probe's answer: each culprit's share
of the victim's wait blamed on lab culprits. The error of a victim-window is the
largest gap between the two over the culprits, in percentage points.

With nothing pinned, a culprit's CPU use is not spread evenly over the CPUs (the load
balancer may leave both threads of one culprit on one CPU), and a victim waits on the
CPU it is queued on: there the truth is who ran on that CPU while it waited
(``tests/support/sched_trace.py``), handed to :func:`split_error_pp` as ``used_s``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")

PERCENTILES = (50, 75, 90, 95, 100)


def split_error_pp(blamed_s: Mapping[K, float], used_s: Mapping[K, float]) -> float:
    """Largest |blame share - CPU-use share| over the culprits in ``used_s``, in points.

    ``blamed_s``: wait seconds the victim spent behind each culprit (other keys are
    ignored); ``used_s``: each culprit's CPU seconds over the same window."""
    used = sum(max(0.0, v) for v in used_s.values())
    blamed = sum(max(0.0, blamed_s.get(k, 0.0)) for k in used_s)
    if used <= 0 or blamed <= 0:
        raise ValueError("a victim-window needs culprit CPU use and blame on culprits")
    return max(
        abs(max(0.0, blamed_s.get(k, 0.0)) / blamed - max(0.0, u) / used) * 100.0
        for k, u in used_s.items()
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class Distribution:
    """The error distribution of a run, as reported."""

    n: int
    percentiles: dict[int, float]  # q -> error (points)
    within: float  # share of victim-windows with error <= the limit
    limit_pp: float

    @classmethod
    def of(cls, errors: Iterable[float], limit_pp: float = 10.0) -> Distribution:
        errs = list(errors)
        return cls(
            n=len(errs),
            percentiles={q: percentile(errs, q) for q in PERCENTILES},
            within=sum(e <= limit_pp for e in errs) / len(errs) if errs else 0.0,
            limit_pp=limit_pp,
        )

    def __str__(self) -> str:
        ps = " ".join(f"p{q} {v:.1f}" for q, v in self.percentiles.items())
        return (
            f"{self.n} victim-windows: error (points) {ps}; "
            f"{self.within:.0%} within ±{self.limit_pp:g}"
        )
