"""PromQL facts the rule pack and the dashboards share, each written once.

Plain strings, no Grafana SDK: the metric names both read, how a selector, a rate or a
join is written, and the expressions both show (the throttle ratio, the run-queue
p99, refaults per second). The rules (``exporter.rules``) build their decisions from
these; the dashboards (``exporter.dashboards``) draw the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from .catalog import containers as C
from .catalog import findings as F
from .catalog import node as N
from .catalog import own as O
from .catalog import probe as P
from .identity import IDENTITY_LABELS

# The exported series both read: their names come from the catalog (docs/metrics.md).
USAGE = C.CPU_USAGE_SECONDS.name
SAMPLED = C.SAMPLED_SECONDS.name
CPU_REQUEST = C.CPU_REQUEST_CORES.name
CPU_LIMIT = C.CPU_LIMIT_CORES.name
PERIODS = C.CPU_CFS_PERIODS.name
THROTTLED_PERIODS = C.CPU_CFS_THROTTLED_PERIODS.name
THROTTLED_SECONDS = C.CPU_CFS_THROTTLED_SECONDS.name
CPU_SOME = C.CPU_PRESSURE_WAITING_SECONDS.name
CPU_FULL = C.CPU_PRESSURE_STALLED_SECONDS.name
MEM_SOME = C.MEMORY_PRESSURE_WAITING_SECONDS.name
MEM_FULL = C.MEMORY_PRESSURE_STALLED_SECONDS.name
NODE_MEM_SOME = N.NODE_MEMORY_PRESSURE_WAITING_SECONDS.name
# Node-wide PSI per resource: its *some* (waiting) and *full* (stalled) counters.
NODE_PSI = {
    "cpu": (N.NODE_CPU_PRESSURE_WAITING_SECONDS.name, N.NODE_CPU_PRESSURE_STALLED_SECONDS.name),
    "io": (N.NODE_IO_PRESSURE_WAITING_SECONDS.name, N.NODE_IO_PRESSURE_STALLED_SECONDS.name),
    "memory": (NODE_MEM_SOME, N.NODE_MEMORY_PRESSURE_STALLED_SECONDS.name),
}
NODE_STEAL = N.NODE_CPU_STEAL_SECONDS.name
NODE_CONTEXT_SWITCHES = N.NODE_CONTEXT_SWITCHES.name
NODE_CORES = N.NODE_CPU_CORES.name
REFAULTS = C.MEMORY_WORKINGSET_REFAULTS.name
MEM_EVENTS = C.MEMORY_EVENTS.name
WORKING_SET = C.MEMORY_WORKING_SET_BYTES.name
MEM_REQUEST = C.MEMORY_REQUEST_BYTES.name
MEM_LIMIT = C.MEMORY_LIMIT_BYTES.name
RUNQ = P.RUNQUEUE_LATENCY_SECONDS.name  # a histogram: its series are the three below
RUNQ_BUCKET = RUNQ + "_bucket"
RUNQ_COUNT = RUNQ + "_count"
RUNQ_SUM = RUNQ + "_sum"  # the total wait
RUNNABLE = P.RUNNABLE_THREADS.name  # burst demand (threads at once), a histogram
RUNNABLE_BUCKET = RUNNABLE + "_bucket"
RUNNABLE_COUNT = RUNNABLE + "_count"
CPU_ENTITLEMENT = C.CPU_ENTITLEMENT_CORES.name
MEM_ENTITLEMENT = C.MEMORY_ENTITLEMENT_BYTES.name
BLAME_RATIO = P.BLAME_RATIO.name
WORKLOAD_BLAME_RATIO = P.WORKLOAD_BLAME_RATIO.name
CGROUP_INFO = C.CGROUP_INFO.name  # carries `workload` (what owns the container)
ANTAGONIST_WAIT = P.ANTAGONIST_WAIT_SECONDS.name
FINDING = F.FINDING.name
# The exporter's own health (the self-monitoring alerts and the health row), and
# Prometheus's scrape status.
UP = "up"
COMPUTE_SUPPORTED = N.NODE_COMPUTE_SUPPORTED.name
TRACKED_CGROUPS = O.TRACKED_CGROUPS.name
PROBE_LOADED = P.PROBE_LOADED.name
LAST_PASS = O.SAMPLER_LAST_PASS_TIMESTAMP_SECONDS.name
COLLECTOR_SUCCESS = O.COLLECTOR_SUCCESS.name
PROBE_MAP_FAILURES = P.PROBE_MAP_UPDATE_FAILURES.name
PROBE_MAP_ENTRIES = P.PROBE_MAP_ENTRIES.name
PROBE_MAP_CAPACITY = P.PROBE_MAP_CAPACITY.name
PROBE_SCHED_SWITCHES = P.PROBE_SCHED_SWITCHES.name
PROBE_RUN_SECONDS = P.PROBE_PROGRAM_RUN_SECONDS.name
PROBE_RUNS = P.PROBE_PROGRAM_RUNS.name
UNKNOWN_BLAME = P.PROBE_UNKNOWN_BLAME_RATIO.name
BUILD_INFO = O.BUILD_INFO.name  # never has a measured container's labels

# A culprit's identity labels on the blame series: its own series' labels, prefixed.
CULPRIT_IDENTITY = tuple(f"culprit_{lab}" for lab in IDENTITY_LABELS)
# What names a workload culprit (contention_workload_blame_ratio).
WORKLOAD_CULPRIT_LABELS = ("culprit_namespace", "culprit_workload")
# A container's limit, where it has one, is its entitlement's basis: the entitlement
# series are always exported, the *_limit_* families only with an optional collector.
LIMIT_BASIS = 'basis="limit"'


def num(x: float) -> str:
    """A float literal PromQL parses to the same double."""
    if float(x).is_integer():
        return str(int(x))
    return repr(float(x))


def per_second(per_minute: float) -> str:
    """A per-minute threshold as the per-second literal a ``rate()`` is compared with,
    written as the division (``1000 / 60``) so the number says where it comes from.
    PromQL computes it in float64, exactly like Python's ``per_minute / 60``."""
    return f"{num(per_minute)} / 60"


def sel(metric: str, *matchers: str) -> str:
    """``metric{matchers}`` (no braces without matchers)."""
    inner = ", ".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def offset(k: int) -> str:
    return f" offset {k}m" if k else ""


def rate(metric: str, window: str, *matchers: str, k: int = 0) -> str:
    """``rate(metric{matchers}[window] offset km)``: minute ``-k`` when window is 1m."""
    return f"rate({sel(metric, *matchers)}[{window}]{offset(k)})"


def on(labels: Iterable[str], *extra: str) -> str:
    """``on(<node labels>, extra...)``: how series of one exporter are joined."""
    return f"on({', '.join((*labels, *extra))})"


def by(labels: Iterable[str], *extra: str) -> str:
    return f"by({', '.join((*labels, *extra))})"


def throttle_ratio(window: str, *matchers: str) -> str:
    """Throttled CFS periods / periods (the ratio of the CPUThrottlingHigh alert)."""
    return f"{rate(THROTTLED_PERIODS, window, *matchers)} / {rate(PERIODS, window, *matchers)}"


def runq_p99(window: str = "1m", *matchers: str) -> str:
    """Per-victim run-queue p99 from the histogram."""
    return f"histogram_quantile(0.99, {rate(RUNQ_BUCKET, window, *matchers)})"


def runq_events_per_minute(*matchers: str, k: int = 0) -> str:
    return f"{rate(RUNQ_COUNT, '1m', *matchers, k=k)} * 60"


def refaults(window: str, *matchers: str, k: int = 0) -> str:
    """Workingset refaults per second, anonymous and file together."""
    return f"sum without(type) ({rate(REFAULTS, window, *matchers, k=k)})"


def steal_ratio(window: str, *matchers: str, k: int = 0) -> str:
    """The share of the node's CPU time the hypervisor gave to other guests (/proc/stat
    steal over the node's cores): the cpu-steal finding's signal."""
    return f"{rate(NODE_STEAL, window, *matchers, k=k)} / {sel(NODE_CORES, *matchers)}"


def increase(metric: str, window: str, *matchers: str) -> str:
    return f"increase({sel(metric, *matchers)}[{window}])"


def increase_refaults(window: str, *matchers: str) -> str:
    """Workingset refaults over ``window``, anonymous and file together."""
    return f"sum without(type) ({increase(REFAULTS, window, *matchers)})"


def usage_cores(window: str, *matchers: str, k: int = 0) -> str:
    """CPU cores used over the part of ``window`` (ending ``k`` minutes ago) the cgroup
    was watched: a cgroup younger than the window is not understated
    (docs/findings.md#young-series). No value where it was not watched at all (no
    sampled seconds), as the evaluator's: 0/0 would be NaN, and a remediation "NaNm"."""
    watched = f"({rate(SAMPLED, window, *matchers, k=k)} > 0)"
    return f"{rate(USAGE, window, *matchers, k=k)}\n/\n{watched}"
