"""Per-minute signals: each mirrors one PromQL term of the generated rules.

Every decision is made from per-minute *fractions* (stall seconds / minute seconds),
which is exactly what ``rate(x_seconds_total[1m])`` gives in PromQL, and every
comparison is written in the same arithmetic order as the generated rules, so the
evaluator and Prometheus agree to the bit on the scenario corpus (tests/scenarios).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..probe.histogram import RUNQ_BOUNDS_S, estimate_quantile
from ..window.model import MinuteFold, NodeFold
from .thresholds import Thresholds

P99 = 0.99


def frac(value_s: float | None, seconds: float) -> float | None:
    """rate(x_seconds_total[1m]) for one minute: stall seconds per second."""
    if value_s is None or seconds <= 0:
        return None
    return value_s / seconds


def at_least(x: float | None, th: float) -> bool:
    return x is not None and not math.isnan(x) and x >= th


@dataclass(frozen=True, slots=True)
class RunqMinute:
    events: int
    rate: float  # events per second
    le_fraction: dict[float, float | None]  # bound -> share of events at or below it
    overflow_rate: float
    p99_s: float | None  # histogram_quantile estimate (evidence only)

    def floor_ok(self, th: Thresholds) -> bool:
        # rate(_count[1m]) * 60 >= minRunqEvents  or  rate(+Inf) - rate(largest bound) > 0
        return self.rate * 60 >= th.min_runq_events or self.overflow_rate > 0

    def p99_at_least(self, bound_s: float) -> bool:
        """p99 >= ``bound_s`` (a bucket bound): at most 99 % of the minute's waits at or
        below it, ``rate(le=bound) / rate(le="+Inf") <= 0.99`` as the rules write it
        (``rules.terms``), in the same float arithmetic. ``histogram_quantile`` agrees
        but where exactly 99 % are at or below the bound: it interpolates below the
        bound when the bound's own bucket is empty (docs/findings.md)."""
        f = self.le_fraction.get(bound_s)
        return f is not None and not math.isnan(f) and f <= P99


def runq_minute(f: MinuteFold, th: Thresholds) -> RunqMinute | None:
    b = f.runq_buckets
    if b is None or f.seconds <= 0:
        return None
    if len(b) != len(RUNQ_BOUNDS_S) + 1:
        raise ValueError(f"runq_buckets has {len(b)} slots, expected {len(RUNQ_BOUNDS_S) + 1}")
    s = f.seconds
    total = sum(b)
    rate = total / s
    fractions: dict[float, float | None] = {}
    for bound in {th.runq_bound_s, th.critical_runq_bound_s}:
        c = sum(b[: RUNQ_BOUNDS_S.index(bound) + 1])
        fractions[bound] = (c / s) / rate if total > 0 else None
    below_overflow = sum(b[:-1])
    return RunqMinute(
        events=total,
        rate=rate,
        le_fraction=fractions,
        overflow_rate=rate - below_overflow / s,
        p99_s=estimate_quantile(b, P99),
    )


@dataclass(frozen=True, slots=True)
class CpuMinute:
    minute: int
    some: float | None
    full: float | None
    runq: RunqMinute | None
    throttled_ratio: float | None  # this minute only (evidence)

    def runq_slow(self, th: Thresholds, bound_s: float) -> bool:
        return self.runq is not None and self.runq.p99_at_least(bound_s) and self.runq.floor_ok(th)

    def psi_stalled(self, th: Thresholds) -> bool:
        return at_least(self.some, th.stall_some)

    def stalled(self, th: Thresholds) -> bool:
        return self.psi_stalled(th) or self.runq_slow(th, th.runq_bound_s)

    def critical(self, th: Thresholds) -> bool:
        return at_least(self.full, th.critical_cpu_full) or self.runq_slow(
            th, th.critical_runq_bound_s
        )

    def both(self, th: Thresholds) -> bool:
        return self.psi_stalled(th) and self.runq_slow(th, th.runq_bound_s)


def cpu_minute(f: MinuteFold, th: Thresholds) -> CpuMinute:
    tr = None
    if f.periods and f.throttled_periods is not None:
        tr = f.throttled_periods / f.periods
    return CpuMinute(
        minute=f.minute,
        some=frac(f.cpu_some_s, f.seconds),
        full=frac(f.cpu_full_s, f.seconds),
        runq=runq_minute(f, th),
        throttled_ratio=tr,
    )


def mem_stalled(f: MinuteFold, th: Thresholds) -> bool:
    # rate(memory some[1m]) >= memStallSome  or  rate(refaults[1m]) >= refaultPerMin / 60
    if at_least(frac(f.mem_some_s, f.seconds), th.mem_stall_some):
        return True
    return f.seconds > 0 and f.refaults / f.seconds >= th.refault_per_min / 60


def limit_hits(f: MinuteFold) -> int:
    return f.mem_events.get("high", 0) + f.mem_events.get("max", 0)


def node_mem_beyond(n: NodeFold | None, f: MinuteFold | None) -> float | None:
    """The node's memory stall in a minute that the victim's own does not explain.

    Node PSI counts the victim's stall too, so a container thrashing against its own
    limit would otherwise put "the node" under pressure by itself. In a minute the
    victim hit its limit (``memory.events`` high + max rose) its own ``some`` is
    subtracted from the node's; otherwise the node's stands (docs/findings.md).
    ``rate(node[1m]) - rate(victim[1m])`` in the rules, in the same order."""
    if n is None:
        return None
    node = frac(n.mem_some_s, n.seconds)
    if node is None:
        return None
    own = frac(f.mem_some_s, f.seconds) if f is not None and limit_hits(f) > 0 else None
    return node if own is None else node - own


def node_pressure(n: NodeFold | None, f: MinuteFold | None, th: Thresholds) -> bool:
    """The node is under memory pressure from beyond victim ``f`` in this minute."""
    return at_least(node_mem_beyond(n, f), th.node_mem_stall_some)


def node_steal(n: NodeFold | None, cores: float) -> float | None:
    """The share of the node's CPU time the hypervisor gave to other guests in a minute:
    ``rate(contention_node_cpu_steal_seconds_total[1m]) / contention_node_cpu_cores``.
    None when /proc/stat has no steal column or the minute was not sampled."""
    if n is None or cores <= 0:
        return None
    s = frac(n.steal_s, n.seconds)
    return None if s is None else s / cores
