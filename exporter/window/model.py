"""The 5-minute window: per-minute folds of every tracked container and of the node.

This is the whole input of the finding evaluator (``exporter.findings``), which does
no I/O. The sampler folds each pass's deltas into the current minute; a minute is
*complete* once a pass lands in the next one. Everything is plain data so scenario
files can build windows directly.

Conventions: seconds for time, counts for events, bytes for memory. ``None`` means
"not measured" (no quota, no PSI, no probe), never zero.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..identity import Identity

# Culprit keys in blame maps: a cgroup id (int > 1), or one of these.
CULPRIT_IDLE = "idle"  # the CPU ran idle while the victim waited: its own quota
CULPRIT_UNATTRIBUTED = "unattributed"  # wait the probe's slice ring did not cover
CulpritKey = int | str


@dataclass(slots=True)
class MinuteFold:
    """One container's activity during one wall-clock minute."""

    minute: int  # epoch seconds of the minute's start
    seconds: float = 0.0  # wall time covered by the deltas folded in
    cpu_usage_s: float = 0.0
    periods: int | None = None  # CFS periods (None: no quota data)
    throttled_periods: int | None = None
    throttled_s: float | None = None
    cpu_some_s: float | None = None  # PSI cpu some stall time in this minute
    cpu_full_s: float | None = None
    mem_some_s: float | None = None
    mem_full_s: float | None = None
    refaults: int = 0  # workingset refaults (anon + file)
    pgmajfault: int = 0
    mem_events: dict[str, int] = field(default_factory=dict)  # deltas: high, max, oom, oom_kill
    memory_bytes: int | None = None  # last usage seen
    working_set_bytes: int | None = None  # last working set seen
    # Scheduler probe (None when the probe is not loaded):
    runq_buckets: list[int] | None = None  # delta counts per bucket (RUNQ_BOUNDS_S + overflow)
    runq_sum_s: float | None = None
    blame_s: dict[CulpritKey, float] | None = None  # wait seconds per culprit key
    # Burst demand (exporter/probe/burst.py): observations of "threads running or
    # runnable at once" per bucket (BURST_BOUNDS + overflow); None: not measured
    burst_buckets: list[int] | None = None

    def ratio(self, value_s: float | None) -> float | None:
        """A stall time as a fraction of the minute (``rate()`` over 1m in PromQL)."""
        if value_s is None or self.seconds <= 0:
            return None
        return value_s / self.seconds


@dataclass(slots=True)
class ContainerWindow:
    identity: Identity
    cgroup_id: int
    cpu_limit_cores: float | None  # the quota in force (cgroup), else the spec's limit
    memory_limit_bytes: int | None
    # The complete minutes, oldest first: a tuple, replaced (never changed) when a
    # minute completes, so the evaluator's copy of the window shares it.
    folds: tuple[MinuteFold, ...] = ()
    # When the sampler first saw the cgroup (epoch seconds; 0: long ago). Nothing is
    # judged about a cgroup watched for less than sustainMinutes (docs/findings.md).
    first_seen: float = 0.0
    # When it was found gone (epoch seconds; None: still tracked). Window.departed only.
    gone_at: float | None = None


@dataclass(slots=True)
class NodeFold:
    minute: int
    seconds: float = 0.0
    cpu_some_s: float | None = None
    cpu_full_s: float | None = None
    mem_some_s: float | None = None
    mem_full_s: float | None = None
    io_some_s: float | None = None
    context_switches: int = 0
    steal_s: float | None = None  # CPU seconds stolen, over all CPUs (None: no steal column)

    def ratio(self, value_s: float | None) -> float | None:
        if value_s is None or self.seconds <= 0:
            return None
        return value_s / self.seconds


@dataclass(slots=True)
class Window:
    """The last ``minutes`` complete minutes, oldest first, for every container."""

    minutes: int
    containers: dict[int, ContainerWindow] = field(default_factory=dict)  # by cgroup id
    node: deque[NodeFold] = field(default_factory=deque)
    node_cpu_cores: float = 0.0
    node_memory_bytes: int = 0
    # Culprits the blame maps name that are not tracked containers (system units, the
    # kernel, opted-out pods): cgroup id -> identity, for naming them in findings.
    others: dict[int, Identity] = field(default_factory=dict)
    probe_loaded: bool = False
    # Workload members gone within the window, with their minutes up to the pass that
    # found them gone: a workload is judged at the earlier minute boundaries of the
    # sustain with the members that ran then (docs/findings.md#no-kind-flip-while-a-finding-decays).
    departed: dict[int, ContainerWindow] = field(default_factory=dict)
