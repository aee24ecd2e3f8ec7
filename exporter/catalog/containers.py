"""Per-container families: usage, requests, entitlements, throttling, PSI, memory.

Every series carries the container's identity labels (docs/metrics.md, "Per
container"); the labels here are the ones beyond them. Built by
``exporter.exposition.containers``.
"""

from __future__ import annotations

from .model import (
    BYTES,
    CORES,
    FROM_PASS,
    NO_UNIT,
    SECONDS,
    Family,
    Label,
    Scope,
    Type,
)

C = Scope.CONTAINER
COUNTER, GAUGE = Type.COUNTER, Type.GAUGE
BASIS = Label("basis", ("limit", "request", "node"))
# memory.events counters always exported (memory-limit-thrash reads them), then the
# ones --collector.memory_oom adds.
LIMIT_EVENTS = ("high", "max")
OOM_EVENTS = ("low", "oom", "oom_kill")


def some_help(scope: str, what: str) -> str:
    """The HELP of a PSI *some* total (``scope``: whose time)."""
    return f"{scope} time some tasks waited for {what} (PSI 'some' total).{FROM_PASS}"


def full_help(scope: str, what: str) -> str:
    return f"{scope} time all non-idle tasks were stalled on {what} (PSI 'full' total).{FROM_PASS}"


CGROUP_INFO = Family(
    "contention_cgroup_info",
    GAUGE,
    NO_UNIT,
    "A tracked cgroup (always 1): id is its path under the cgroup2 root (cAdvisor's "
    "id), cgroup_id its inode (the scheduler probe's key), kind what it is, for a "
    "Kubernetes container uid (the pod's), container_id and qos, and workload: what "
    "owns it (Deployment/web, CronJob/backup, ...).",
    "containers",
    C,
    tuple(Label(n) for n in ("id", "cgroup_id", "kind", "qos", "uid", "container_id", "workload")),
    doc="a tracked cgroup (above)",
    source="path, inode, pod, what owns it (`Deployment/web`: "
    "[findings.md](findings.md#workload-culprits))",
    constant=True,
)
SAMPLED_SECONDS = Family(
    "contention_sampled_seconds_total",
    COUNTER,
    SECONDS,
    "Wall-clock time this exporter has watched the cgroup (the time its counters' "
    "deltas cover; restarts at 0 with the exporter). rate(x[w]) / rate(this[w]) "
    "averages x over the part of w the cgroup was watched, right for young cgroups; "
    "the alert rules judge nothing watched for less than sustainMinutes.",
    "containers",
    C,
    doc="wall-clock time this exporter has watched the cgroup: the time its counters' "
    "deltas cover (starts at 0 when the exporter first sees the cgroup, and again after "
    "an exporter restart). `rate(x[5m]) / rate(contention_sampled_seconds_total[5m])` "
    "averages `x` over the part of the window the cgroup was watched — what the rules "
    "use for a culprit's CPU usage, so a cgroup younger than the window is not "
    "understated",
    source="sampler clock",
)
CPU_USAGE_SECONDS = Family(
    "contention_cpu_usage_seconds_total",
    COUNTER,
    SECONDS,
    f"CPU time used by the cgroup (cpu.stat usage_usec).{FROM_PASS}",
    "containers",
    C,
    doc="CPU time used",
    source="`cpu.stat` `usage_usec`",
)
CPU_REQUEST_CORES = Family(
    "contention_cpu_request_cores",
    GAUGE,
    CORES,
    "CPU request in cores, from the pod spec (requests are not in the cgroup); "
    "absent when unknown.",
    "containers",
    C,
    doc="CPU request; absent when unknown",
    source="pod spec or metadata file",
)
CPU_ENTITLEMENT_CORES = Family(
    "contention_cpu_entitlement_cores",
    GAUGE,
    CORES,
    "What the cgroup's CPU use is measured against: its limit, else its request, else "
    "the node's CPUs (basis says which).",
    "containers",
    C,
    (BASIS,),
    doc="what usage is measured against: limit, else request, else the node's CPUs "
    '(with `basis="limit"` it is the CPU limit)',
)
CPU_CFS_PERIODS = Family(
    "contention_cpu_cfs_periods_total",
    COUNTER,
    NO_UNIT,
    f"CFS bandwidth periods in which the cgroup ran (cpu.stat nr_periods).{FROM_PASS}",
    "containers",
    C,
    doc="CFS bandwidth periods in which the cgroup ran",
    source="`cpu.stat` `nr_periods` (v1 too)",
)
CPU_CFS_THROTTLED_PERIODS = Family(
    "contention_cpu_cfs_throttled_periods_total",
    COUNTER,
    NO_UNIT,
    "CFS periods in which the cgroup hit its own quota and was throttled (cpu.stat "
    f"nr_throttled).{FROM_PASS}",
    "containers",
    C,
    doc="periods in which it ran out of its own quota",
    source="`cpu.stat` `nr_throttled`",
)
CPU_CFS_THROTTLED_SECONDS = Family(
    "contention_cpu_cfs_throttled_seconds_total",
    COUNTER,
    SECONDS,
    "Time the cgroup's runnable tasks were throttled by its own quota (cpu.stat "
    f"throttled_usec; v1 throttled_time).{FROM_PASS}",
    "containers",
    C,
    doc="time its runnable tasks were held back by its own quota",
    source="`cpu.stat` `throttled_usec`; v1 `throttled_time` (ns)",
)
CPU_PRESSURE_WAITING_SECONDS = Family(
    "contention_pressure_cpu_waiting_seconds_total",
    COUNTER,
    SECONDS,
    some_help("Cgroup", "CPU"),
    "containers",
    C,
    doc="time some of its tasks were runnable but not running (PSI *some*)",
    source="`cpu.pressure`",
)
CPU_PRESSURE_STALLED_SECONDS = Family(
    "contention_pressure_cpu_stalled_seconds_total",
    COUNTER,
    SECONDS,
    full_help("Cgroup", "CPU"),
    "containers",
    C,
    doc="time all its non-idle tasks were stalled (PSI *full*)",
    source="`cpu.pressure`",
)
MEMORY_WORKING_SET_BYTES = Family(
    "contention_memory_working_set_bytes",
    GAUGE,
    BYTES,
    "Memory usage minus inactive file cache (what the kubelet evicts on).",
    "containers",
    C,
    doc="usage minus inactive file cache",
    source="`memory.current`, `memory.stat`",
)
MEMORY_REQUEST_BYTES = Family(
    "contention_memory_request_bytes",
    GAUGE,
    BYTES,
    "Memory request from the pod spec; absent when unknown.",
    "containers",
    C,
    doc="memory request; absent when unknown",
    source="pod spec or metadata file",
)
MEMORY_ENTITLEMENT_BYTES = Family(
    "contention_memory_entitlement_bytes",
    GAUGE,
    BYTES,
    "What memory use is measured against: limit, else request, else node memory.",
    "containers",
    C,
    (BASIS,),
    doc="limit, else request, else node memory",
)
MEMORY_PRESSURE_WAITING_SECONDS = Family(
    "contention_pressure_memory_waiting_seconds_total",
    COUNTER,
    SECONDS,
    some_help("Cgroup", "memory"),
    "containers",
    C,
    doc="PSI memory *some*",
    source="`memory.pressure`",
)
MEMORY_PRESSURE_STALLED_SECONDS = Family(
    "contention_pressure_memory_stalled_seconds_total",
    COUNTER,
    SECONDS,
    full_help("Cgroup", "memory"),
    "containers",
    C,
    doc="PSI memory *full*",
    source="`memory.pressure`",
)
MEMORY_WORKINGSET_REFAULTS = Family(
    "contention_memory_workingset_refaults_total",
    COUNTER,
    NO_UNIT,
    "Pages read back soon after being reclaimed (memory.stat workingset_refault_*): "
    f"thrashing.{FROM_PASS}",
    "containers",
    C,
    (Label("type", ("anon", "file"), every_value=True),),
    doc="pages read back soon after being reclaimed: thrashing",
    source="`memory.stat` `workingset_refault_*`",
)
MEMORY_EVENTS = Family(
    "contention_memory_events_total",
    COUNTER,
    NO_UNIT,
    "Times the cgroup hit its memory boundaries (memory.events; v1: failcnt as "
    f"event=max).{FROM_PASS}",
    "containers",
    C,
    (Label("event", LIMIT_EVENTS, True, OOM_EVENTS, "memory_oom"),),
    doc="times the cgroup hit its memory boundaries",
    source="`memory.events`; v1: `memory.failcnt` as `max`",
)

# -- off by default (catalog.collectors) ------------------------------------------------

CPU_LIMIT_CORES = Family(
    "contention_cpu_limit_cores",
    GAUGE,
    CORES,
    "CPU limit in cores (cpu.max quota/period, v1 cfs_quota_us/cfs_period_us); "
    "absent when unlimited.",
    "cpu_spec",
    C,
    doc="CPU limit; absent when unlimited",
    source="`cpu.max`, v1 `cpu.cfs_quota_us`/`cfs_period_us`",
)
CPU_WEIGHT = Family(
    "contention_cpu_weight",
    GAUGE,
    NO_UNIT,
    "cpu.weight (1-10000; on cgroup v1 converted from cpu.shares).",
    "cpu_spec",
    C,
    doc="1–10000",  # noqa: RUF001 (markdown: a range)
    source="`cpu.weight`, v1 `cpu.shares` converted",
)
MEMORY_LIMIT_BYTES = Family(
    "contention_memory_limit_bytes",
    GAUGE,
    BYTES,
    "memory.max (v1 memory.limit_in_bytes); absent when unlimited.",
    "memory_spec",
    C,
    doc="memory limit; absent when unlimited",
    source="`memory.max`, v1 `memory.limit_in_bytes`",
)
MEMORY_HIGH_BYTES = Family(
    "contention_memory_high_bytes",
    GAUGE,
    BYTES,
    "memory.high throttling boundary; absent when unlimited.",
    "memory_spec",
    C,
    doc="throttling boundary; absent when unlimited",
    source="`memory.high`",
)
MEMORY_USAGE_BYTES = Family(
    "contention_memory_usage_bytes",
    GAUGE,
    BYTES,
    "Memory charged to the cgroup (memory.current; v1 memory.usage_in_bytes).",
    "memory_usage",
    C,
    doc="memory charged to the cgroup",
    source="`memory.current`, v1 `memory.usage_in_bytes`",
)
MEMORY_MAJOR_FAULTS = Family(
    "contention_memory_major_faults_total",
    COUNTER,
    NO_UNIT,
    f"Major page faults (memory.stat pgmajfault).{FROM_PASS}",
    "memory_usage",
    C,
    doc="major page faults",
    source="`memory.stat` `pgmajfault`",
)
IO_PRESSURE_WAITING_SECONDS = Family(
    "contention_pressure_io_waiting_seconds_total",
    COUNTER,
    SECONDS,
    some_help("Cgroup", "IO"),
    "io_pressure",
    C,
    doc="PSI io *some*",
    source="`io.pressure`",
)
IO_PRESSURE_STALLED_SECONDS = Family(
    "contention_pressure_io_stalled_seconds_total",
    COUNTER,
    SECONDS,
    full_help("Cgroup", "IO"),
    "io_pressure",
    C,
    doc="PSI io *full*",
    source="`io.pressure`",
)

FAMILIES = (
    CGROUP_INFO,
    SAMPLED_SECONDS,
    CPU_USAGE_SECONDS,
    CPU_REQUEST_CORES,
    CPU_ENTITLEMENT_CORES,
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_SECONDS,
    CPU_PRESSURE_WAITING_SECONDS,
    CPU_PRESSURE_STALLED_SECONDS,
    MEMORY_WORKING_SET_BYTES,
    MEMORY_REQUEST_BYTES,
    MEMORY_ENTITLEMENT_BYTES,
    MEMORY_PRESSURE_WAITING_SECONDS,
    MEMORY_PRESSURE_STALLED_SECONDS,
    MEMORY_WORKINGSET_REFAULTS,
    MEMORY_EVENTS,
    CPU_LIMIT_CORES,
    CPU_WEIGHT,
    MEMORY_LIMIT_BYTES,
    MEMORY_HIGH_BYTES,
    MEMORY_USAGE_BYTES,
    MEMORY_MAJOR_FAULTS,
    IO_PRESSURE_WAITING_SECONDS,
    IO_PRESSURE_STALLED_SECONDS,
)
