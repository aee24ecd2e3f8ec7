"""PromQL facts the rule pack and the dashboards share, each written once.

Plain strings, no Grafana SDK: the metric names both read, how a selector, a rate or a
join is written, and the expressions both show (the throttle ratio, the run-queue
p99, refaults per second). The rules (``exporter.rules``) build their decisions from
these; the dashboards (``exporter.dashboards``) draw the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from .identity import IDENTITY_LABELS

# The exported series both read (docs/metrics.md).
USAGE = "contention_cpu_usage_seconds_total"
SAMPLED = "contention_sampled_seconds_total"
CPU_REQUEST = "contention_cpu_request_cores"
CPU_LIMIT = "contention_cpu_limit_cores"
PERIODS = "contention_cpu_cfs_periods_total"
THROTTLED_PERIODS = "contention_cpu_cfs_throttled_periods_total"
THROTTLED_SECONDS = "contention_cpu_cfs_throttled_seconds_total"
CPU_SOME = "contention_cpu_pressure_waiting_seconds_total"
CPU_FULL = "contention_cpu_pressure_stalled_seconds_total"
MEM_SOME = "contention_memory_pressure_waiting_seconds_total"
MEM_FULL = "contention_memory_pressure_stalled_seconds_total"
NODE_MEM_SOME = "contention_node_memory_pressure_waiting_seconds_total"
NODE_STEAL = "contention_node_cpu_steal_seconds_total"
NODE_CORES = "contention_node_cpu_cores"
REFAULTS = "contention_memory_workingset_refaults_total"
MEM_EVENTS = "contention_memory_events_total"
WORKING_SET = "contention_memory_working_set_bytes"
MEM_REQUEST = "contention_memory_request_bytes"
MEM_LIMIT = "contention_memory_limit_bytes"
RUNQ_BUCKET = "contention_runqueue_latency_seconds_bucket"
RUNQ_COUNT = "contention_runqueue_latency_seconds_count"
RUNQ_SUM = "contention_runqueue_latency_seconds_sum"  # the total wait
CPU_ENTITLEMENT = "contention_cpu_entitlement_cores"
MEM_ENTITLEMENT = "contention_memory_entitlement_bytes"
BLAME_SHARE = "contention_blame_share"
WORKLOAD_BLAME_SHARE = "contention_workload_blame_share"
CGROUP_INFO = "contention_cgroup_info"  # carries `workload` (what owns the container)
ANTAGONIST_WAIT = "contention_antagonist_wait_seconds_total"
FINDING = "contention_finding"
# The exporter's own health (the self-monitoring alerts), and Prometheus's scrape status.
UP = "up"
PROBE_LOADED = "contention_probe_loaded"
LAST_PASS = "contention_sampler_last_pass_timestamp_seconds"
COLLECTOR_SUCCESS = "contention_collector_success"
PROBE_MAP_FAILURES = "contention_probe_map_update_failures_total"
UNKNOWN_BLAME = "contention_probe_unknown_blame_ratio"

# A culprit's identity labels on the blame series: its own series' labels, prefixed.
CULPRIT_IDENTITY = tuple(f"culprit_{lab}" for lab in IDENTITY_LABELS)
# What names a workload culprit (contention_workload_blame_share).
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
    (docs/findings.md#young-series)."""
    return f"{rate(USAGE, window, *matchers, k=k)}\n/\n{rate(SAMPLED, window, *matchers, k=k)}"
