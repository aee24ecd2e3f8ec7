"""Plain data returned by the cgroup and proc parsers.

Not frozen: a frozen dataclass pays ``object.__setattr__`` per field on every
construction, and the sampler builds ~10 of these per cgroup per pass. Treat them as
read-only all the same.

Units are the kernel's (microseconds, bytes, counts); conversion to Prometheus base
units happens in the collector. ``None`` always means "the kernel did not report it"
(no quota, no PSI, a v2-only key on a hybrid node), never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class CpuStat:
    """cgroup v2 ``cpu.stat`` (throttle keys only exist where the cpu controller is on)."""

    usage_usec: int
    user_usec: int
    system_usec: int
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_usec: int | None = None
    nr_bursts: int | None = None
    burst_usec: int | None = None


@dataclass(slots=True)
class CpuStatV1:
    """cgroup v1 ``cpu.stat`` of the ``cpu`` controller (``throttled_time`` is in ns)."""

    nr_periods: int
    nr_throttled: int
    throttled_time_ns: int


@dataclass(slots=True)
class CpuMax:
    """``cpu.max`` (v2) or ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (v1).

    ``quota_usec`` is ``None`` when unlimited ("max" in v2, -1 in v1).
    """

    quota_usec: int | None
    period_usec: int

    @property
    def limit_cores(self) -> float | None:
        if self.quota_usec is None or self.period_usec <= 0:
            return None
        return self.quota_usec / self.period_usec


@dataclass(slots=True)
class PressureLine:
    avg10: float
    avg60: float
    avg300: float
    total_usec: int


@dataclass(slots=True)
class Pressure:
    """A PSI file: ``some`` always; ``full`` absent in old kernels' cpu.pressure."""

    some: PressureLine
    full: PressureLine | None = None


@dataclass(slots=True)
class MemoryStat:
    """The ``memory.stat`` keys the layers use (bytes, except the event counters)."""

    anon: int = 0
    file: int = 0
    inactive_file: int = 0
    active_file: int = 0
    workingset_refault_anon: int = 0
    workingset_refault_file: int = 0
    pgmajfault: int = 0

    @property
    def refaults(self) -> int:
        return self.workingset_refault_anon + self.workingset_refault_file


@dataclass(slots=True)
class MemoryEvents:
    """``memory.events``: how often the cgroup hit its own boundaries."""

    low: int = 0
    high: int = 0
    max: int = 0
    oom: int = 0
    oom_kill: int = 0
    oom_group_kill: int = 0


@dataclass(slots=True)
class ProcStat:
    """The parts of ``/proc/stat`` we use. CPU times are in USER_HZ ticks."""

    ctxt: int
    steal_ticks: int | None  # None: no steal column (kernels before 2.6.11)
    total_ticks: int
    cpus: int
    procs_running: int | None = None
    procs_blocked: int | None = None


@dataclass(slots=True)
class CgroupReading:
    """One read of every file of one cgroup, in one sampler pass.

    Fields are ``None`` where the file does not exist on this node (no quota file on
    hybrid v2, no PSI, no memory controller) — "no data", not an error.
    """

    cpu_stat: CpuStat | None = None
    cpu_stat_v1: CpuStatV1 | None = None
    cpu_max: CpuMax | None = None
    cpu_weight: int | None = None
    cpu_pressure: Pressure | None = None
    memory_current: int | None = None
    memory_max: int | None = None  # None = unlimited
    memory_high: int | None = None  # None = unlimited
    memory_stat: MemoryStat | None = None
    memory_events: MemoryEvents | None = None
    memory_pressure: Pressure | None = None
    io_pressure: Pressure | None = None
    files_read: int = 0
    missing: tuple[str, ...] = field(default=())
