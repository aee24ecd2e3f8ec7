"""The scheduler probe: in-kernel run-queue latency and victim -> culprit blame (BCC).

The C program lives in ``bpf/sched_probe.c``; this package loads it, reads and diffs
its maps, does the histogram maths and names culprits. It hands plain data to the
sampler; ``exporter.probe.metrics`` turns that into Prometheus families.
"""

from .culprit import ROOT_CGROUP_ID, Culprit, CulpritKind, classify_culprit
from .histogram import (
    RUNQ_BOUNDS_S,
    RUNQ_SLOTS,
    cumulative_buckets,
    estimate_quantile,
    quantile_at_least,
)
from .loader import SchedProbe
from .model import BlameCell, ProbeDelta, ProbeTotals, ProgramStats, RunqDelta, RunqHistogram
from .status import REASONS, ProbeStatus

__all__ = [
    "REASONS",
    "ROOT_CGROUP_ID",
    "RUNQ_BOUNDS_S",
    "RUNQ_SLOTS",
    "BlameCell",
    "Culprit",
    "CulpritKind",
    "ProbeDelta",
    "ProbeStatus",
    "ProbeTotals",
    "ProgramStats",
    "RunqDelta",
    "RunqHistogram",
    "SchedProbe",
    "classify_culprit",
    "cumulative_buckets",
    "estimate_quantile",
    "quantile_at_least",
]
