"""What one sampler pass produced: immutable records the exposition renders.

A :class:`Snapshot` holds every tracked cgroup's reading and derived values, the
node's, and how each part of the pass went, all from one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cgroupfs.mode import NodeLayout
from ..cgroupfs.model import CgroupReading, Pressure, ProcStat
from ..identity import Identity
from ..probe.fold import ProbeSnapshot
from .entitlement import Entitlement


@dataclass(slots=True)
class ContainerSample:
    """One tracked cgroup in one pass: its identity, raw reading and derived values."""

    cgroup_id: int
    identity: Identity
    reading: CgroupReading
    cpu_limit_cores: float | None
    cpu_entitlement: Entitlement
    memory_limit_bytes: int | None
    memory_entitlement: Entitlement
    periods: int | None
    throttled_periods: int | None
    throttled_usec: int | None
    working_set_bytes: int | None
    # Wall-clock seconds covered by this cgroup's deltas since the sampler first saw it
    # (contention_sampled_seconds_total): the denominator that averages a counter over
    # the part of a window the cgroup was watched, right for cgroups younger than it.
    sampled_s: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeSample:
    proc_stat: ProcStat | None
    cpu_pressure: Pressure | None
    memory_pressure: Pressure | None
    io_pressure: Pressure | None
    cpu_cores: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class LostCgroup:
    """A cgroup (or a directory of cgroups) a pass could not sample, and why."""

    path: str  # relative to the cgroup2 root; a directory's path for "unreadable" ones
    reason: str  # one of the sampler's SKIP_REASONS
    detail: str  # what went wrong, as logged


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    success: bool
    duration_s: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one completed pass read."""

    taken_at: float
    pass_duration_s: float
    facts: NodeLayout
    containers: tuple[ContainerSample, ...]
    node: NodeSample
    skipped_total: dict[str, int]
    collectors: dict[str, CollectorStatus]
    identity_staleness_s: float | None
    passes_total: int
    probe: ProbeSnapshot | None = None  # when a probe is configured (loaded or not)
    # Cgroups this pass could not sample (each also counted in skipped_total).
    lost: tuple[LostCgroup, ...] = ()
    failed_passes_total: int = 0  # passes that failed as a whole since start
