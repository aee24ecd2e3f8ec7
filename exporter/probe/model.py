"""Plain data the probe hands to the sampler and the exposition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..window.model import CulpritKey
from .decode import BURST_SLOTS
from .histogram import RUNQ_SLOTS


def _no_burst() -> list[int]:
    return [0] * BURST_SLOTS


@dataclass(slots=True)
class RunqDelta:
    """One victim's run-queue waits since the previous poll, and its burst demand's
    observations (exporter/probe/burst.py)."""

    counts: list[int]  # per bucket, aligned with RUNQ_BOUNDS_S + the overflow bucket
    sum_s: float  # total wait in seconds
    burst: list[int] = field(default_factory=_no_burst)  # per BURST_BOUNDS + overflow
    burst_sum: int = 0  # sum of the observed thread counts

    @property
    def events(self) -> int:
        return sum(self.counts)


@dataclass(slots=True)
class RunqHistogram:
    """A victim's cumulative histograms, run-queue wait and burst demand (monotonic
    across kernel key resets)."""

    counts: list[int] = field(default_factory=lambda: [0] * RUNQ_SLOTS)
    sum_s: float = 0.0
    burst: list[int] = field(default_factory=_no_burst)
    burst_sum: int = 0

    @property
    def events(self) -> int:
        return sum(self.counts)

    def add(self, delta: RunqDelta) -> None:
        if len(delta.counts) != len(self.counts) or len(delta.burst) != len(self.burst):
            raise ValueError("bucket layout mismatch")
        for i, c in enumerate(delta.counts):
            self.counts[i] += c
        self.sum_s += delta.sum_s
        for i, c in enumerate(delta.burst):
            self.burst[i] += c
        self.burst_sum += delta.burst_sum

    def copy(self) -> RunqHistogram:
        return RunqHistogram(list(self.counts), self.sum_s, list(self.burst), self.burst_sum)


@dataclass(slots=True)
class BlameCell:
    """Wait a victim spent behind one culprit since the previous poll."""

    wait_s: float
    events: int  # waits (>= the minimum latency) in which this culprit took part


@dataclass(slots=True)
class ProgramStats:
    """Kernel-side cost of one BPF program (needs kernel.bpf_stats_enabled=1)."""

    run_time_ns: int
    run_count: int

    @property
    def ns_per_run(self) -> float | None:
        return self.run_time_ns / self.run_count if self.run_count else None


@dataclass(slots=True)
class ProbeDelta:
    """Everything that happened between two polls."""

    interval_s: float
    runq: dict[int, RunqDelta] = field(default_factory=dict)  # victim cgroup id ->
    # victim -> culprit key (cgroup id, CULPRIT_IDLE or CULPRIT_UNATTRIBUTED) -> cell
    blame: dict[int, dict[CulpritKey, BlameCell]] = field(default_factory=dict)
    context_switches: int = 0  # sched_switch events the probe saw (whole node)
    enqueues: int = 0  # tracked tasks that became runnable
    runq_events: int = 0  # waits recorded in histograms
    blame_events: int = 0  # waits that entered the matrix
    unknown_pid_wakeups: int = 0  # wakeups of tasks whose cgroup was not known yet
    ring_short: int = 0  # waits the slice ring did not fully cover (occupancy mode)
    migrated_waits: int = 0  # waits split by a migration (per migration; occupancy mode)
    burst_measured: bool = False  # the kernel counts burst demand (RunqDelta.burst)
    update_failures: dict[str, int] = field(default_factory=dict)  # per map, this poll
    map_entries: dict[str, int] = field(default_factory=dict)  # occupancy now, per map
    map_capacity: dict[str, int] = field(default_factory=dict)  # max entries, per map


@dataclass(slots=True)
class ProbeTotals:
    """Cumulative node-level probe counters, for the collector's ``_total`` series."""

    context_switches: int = 0
    runq_events: int = 0
    blame_events: int = 0
    update_failures: dict[str, int] = field(default_factory=dict)
    map_entries: dict[str, int] = field(default_factory=dict)
    map_capacity: dict[str, int] = field(default_factory=dict)
    programs: dict[str, ProgramStats] = field(default_factory=dict)  # by tracepoint
    migrated_waits: int = 0

    def copy(self) -> ProbeTotals:
        return ProbeTotals(
            self.context_switches,
            self.runq_events,
            self.blame_events,
            dict(self.update_failures),
            dict(self.map_entries),
            dict(self.map_capacity),
            {k: ProgramStats(v.run_time_ns, v.run_count) for k, v in self.programs.items()},
            self.migrated_waits,
        )


def runq_delta(values: Sequence[int], nslots: int) -> RunqDelta:
    """Kernel histogram value ``(slot_0 .. slot_{nslots-1}, sum_ns, burst_0 ..
    burst_{BURST_SLOTS-1}, burst_sum)`` (``decode.runq_value``) -> RunqDelta."""
    if len(values) != nslots + BURST_SLOTS + 2:
        raise ValueError(f"{len(values)} histogram values, expected {nslots + BURST_SLOTS + 2}")
    return RunqDelta(
        counts=list(values[:nslots]),
        sum_s=values[nslots] / 1e9,
        burst=list(values[nslots + 1 : -1]),
        burst_sum=values[-1],
    )
