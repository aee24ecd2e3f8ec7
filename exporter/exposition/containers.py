"""Per-container families from one sampler snapshot: usage, requests, entitlements,
throttling, PSI, memory.

Each series carries the container's identity labels (``Identity.series_labels``: its
names, or its cgroup path) and nothing empty; ``contention_cgroup_info`` carries the
rest (path, cgroup id, pod UID, container ID, QoS). Families that cAdvisor or
kube-state-metrics already export and nothing of ours reads are off unless asked for
(``OPTIONAL_COLLECTORS``, ``--collector.<name>``; docs/metrics.md gives the series
count per container for each setting).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..cgroupfs.model import Pressure
from ..identity import ambiguous_names
from ..sampler.snapshot import Snapshot
from .node import FROM_PASS
from .series import add

# Optional families: what else exports them. The rules, dashboards and findings read
# none of these (the entitlement gauges carry the limit: basis="limit").
OPTIONAL_COLLECTORS: dict[str, str] = {
    "cpu_spec": "contention_cpu_limit_cores, contention_cpu_weight (cAdvisor: "
    "container_spec_cpu_quota/_period/_shares; kube-state-metrics: resource limits)",
    "memory_spec": "contention_memory_limit_bytes, contention_memory_high_bytes "
    "(cAdvisor: container_spec_memory_limit_bytes)",
    "memory_usage": "contention_memory_usage_bytes, contention_memory_major_faults_total "
    "(cAdvisor: container_memory_usage_bytes, container_memory_failures_total)",
    "memory_oom": "contention_memory_events_total for low, oom and oom_kill; high and max "
    "are always exported, the rules read them (cAdvisor: container_oom_events_total)",
    "io_pressure": "contention_io_pressure_{waiting,stalled}_seconds_total (cAdvisor with "
    "PSI: container_pressure_io_*)",
}
# memory.events counters always exported (memory-limit-thrash reads them), then the rest.
LIMIT_EVENTS = ("high", "max")
OOM_EVENTS = ("low", "oom", "oom_kill")


def _pressure(prefix: str, what: str) -> tuple[CounterMetricFamily, CounterMetricFamily]:
    some = CounterMetricFamily(
        f"{prefix}_pressure_waiting_seconds_total",
        f"Cgroup time some tasks waited for {what} (PSI 'some' total).{FROM_PASS}",
    )
    full = CounterMetricFamily(
        f"{prefix}_pressure_stalled_seconds_total",
        f"Cgroup time all non-idle tasks were stalled on {what} (PSI 'full' total).{FROM_PASS}",
    )
    return some, full


def _add_pressure(
    fams: tuple[CounterMetricFamily, CounterMetricFamily], lv: dict[str, str], p: Pressure | None
) -> None:
    if p is None:
        return
    add(fams[0], lv, p.some.total_usec / 1e6)
    if p.full is not None:
        add(fams[1], lv, p.full.total_usec / 1e6)


def _put(fam: Metric, labels: dict[str, str], v: float | None) -> None:
    """A series only when the kernel reported the value: absent, never 0, for unknown."""
    if v is not None:
        add(fam, labels, v)


def container_families(  # noqa: C901 - one family after another
    snap: Snapshot, collectors: Collection[str] = ()
) -> Iterator[Metric]:
    """``collectors``: the optional ones (``OPTIONAL_COLLECTORS``) to export too."""
    on = set(collectors)
    info = GaugeMetricFamily(
        "contention_cgroup_info",
        "A tracked cgroup (always 1): id is its path under the cgroup2 root (cAdvisor's "
        "id), cgroup_id its inode (the scheduler probe's key), kind what it is, for a "
        "Kubernetes container uid (the pod's), container_id and qos, and workload: what "
        "owns it (Deployment/web, CronJob/backup, ...).",
    )
    sampled = CounterMetricFamily(
        "contention_sampled_seconds_total",
        "Wall-clock time this exporter has watched the cgroup (the time its counters' "
        "deltas cover; restarts at 0 with the exporter). rate(x[w]) / rate(this[w]) "
        "averages x over the part of w the cgroup was watched, right for young cgroups; "
        "the alert rules judge nothing watched for less than sustainMinutes.",
    )
    usage = CounterMetricFamily(
        "contention_cpu_usage_seconds_total",
        f"CPU time used by the cgroup (cpu.stat usage_usec).{FROM_PASS}",
    )
    limit = GaugeMetricFamily(
        "contention_cpu_limit_cores",
        "CPU limit in cores (cpu.max quota/period, v1 cfs_quota_us/cfs_period_us); "
        "absent when unlimited.",
    )
    request = GaugeMetricFamily(
        "contention_cpu_request_cores",
        "CPU request in cores, from the pod spec (requests are not in the cgroup); "
        "absent when unknown.",
    )
    cpu_ent = GaugeMetricFamily(
        "contention_cpu_entitlement_cores",
        "What the cgroup's CPU use is measured against: its limit, else its request, else "
        "the node's CPUs (basis says which).",
    )
    weight = GaugeMetricFamily(
        "contention_cpu_weight",
        "cpu.weight (1-10000; on cgroup v1 converted from cpu.shares).",
    )
    periods = CounterMetricFamily(
        "contention_cpu_cfs_periods_total",
        f"CFS bandwidth periods in which the cgroup ran (cpu.stat nr_periods).{FROM_PASS}",
    )
    throttled = CounterMetricFamily(
        "contention_cpu_cfs_throttled_periods_total",
        "CFS periods in which the cgroup hit its own quota and was throttled (cpu.stat "
        f"nr_throttled).{FROM_PASS}",
    )
    throttled_s = CounterMetricFamily(
        "contention_cpu_cfs_throttled_seconds_total",
        "Time the cgroup's runnable tasks were throttled by its own quota (cpu.stat "
        f"throttled_usec; v1 throttled_time).{FROM_PASS}",
    )
    cpu_p = _pressure("contention_cpu", "CPU")
    mem_p = _pressure("contention_memory", "memory")
    io_p = _pressure("contention_io", "IO")
    mem_usage = GaugeMetricFamily(
        "contention_memory_usage_bytes",
        "Memory charged to the cgroup (memory.current; v1 memory.usage_in_bytes).",
    )
    ws = GaugeMetricFamily(
        "contention_memory_working_set_bytes",
        "Memory usage minus inactive file cache (what the kubelet evicts on).",
    )
    mem_limit = GaugeMetricFamily(
        "contention_memory_limit_bytes",
        "memory.max (v1 memory.limit_in_bytes); absent when unlimited.",
    )
    mem_high = GaugeMetricFamily(
        "contention_memory_high_bytes",
        "memory.high throttling boundary; absent when unlimited.",
    )
    mem_request = GaugeMetricFamily(
        "contention_memory_request_bytes",
        "Memory request from the pod spec; absent when unknown.",
    )
    mem_ent = GaugeMetricFamily(
        "contention_memory_entitlement_bytes",
        "What memory use is measured against: limit, else request, else node memory.",
    )
    refaults = CounterMetricFamily(
        "contention_memory_workingset_refaults_total",
        "Pages read back soon after being reclaimed (memory.stat workingset_refault_*): "
        f"thrashing.{FROM_PASS}",
    )
    majflt = CounterMetricFamily(
        "contention_memory_major_faults_total",
        f"Major page faults (memory.stat pgmajfault).{FROM_PASS}",
    )
    events = CounterMetricFamily(
        "contention_memory_events_total",
        "Times the cgroup hit its memory boundaries (memory.events; v1: failcnt as "
        f"event=max).{FROM_PASS}",
    )
    event_names = LIMIT_EVENTS + (OOM_EVENTS if "memory_oom" in on else ())
    ambiguous = ambiguous_names(c.identity for c in snap.containers)
    for c in snap.containers:
        i, r = c.identity, c.reading
        lv = i.series_labels(ambiguous)
        meta = {"id": i.cgroup, "cgroup_id": str(c.cgroup_id), "kind": i.kind.value}
        extra = (("qos", i.qos), ("uid", i.pod_uid), ("workload", i.workload))
        meta.update((k, v) for k, v in extra if v)
        if i.container_id:
            meta["container_id"] = i.container_uri
        add(info, {**lv, **meta}, 1)
        add(sampled, lv, c.sampled_s)
        _put(usage, lv, r.cpu_stat.usage_usec / 1e6 if r.cpu_stat is not None else None)
        _put(request, lv, i.cpu_request_cores)
        add(cpu_ent, {**lv, "basis": c.cpu_entitlement.basis}, c.cpu_entitlement.value)
        if "cpu_spec" in on:
            _put(limit, lv, c.cpu_limit_cores)
            _put(weight, lv, r.cpu_weight)
        _put(periods, lv, c.periods)
        _put(throttled, lv, c.throttled_periods)
        _put(throttled_s, lv, c.throttled_usec / 1e6 if c.throttled_usec is not None else None)
        _add_pressure(cpu_p, lv, r.cpu_pressure)
        _add_pressure(mem_p, lv, r.memory_pressure)
        if "io_pressure" in on:
            _add_pressure(io_p, lv, r.io_pressure)
        _put(ws, lv, c.working_set_bytes)
        _put(mem_request, lv, i.memory_request_bytes)
        if "memory_usage" in on:
            _put(mem_usage, lv, r.memory_current)
        if "memory_spec" in on:
            _put(mem_limit, lv, c.memory_limit_bytes)
            _put(mem_high, lv, r.memory_high)
        me = c.memory_entitlement
        # The node's memory unknown (/proc/meminfo unreadable): no series, not a 0.
        known = me.basis != "node" or me.value > 0
        if known and (r.memory_current is not None or r.memory_max is not None):
            add(mem_ent, {**lv, "basis": me.basis}, me.value)
        if r.memory_stat is not None:
            add(refaults, {**lv, "type": "anon"}, r.memory_stat.workingset_refault_anon)
            add(refaults, {**lv, "type": "file"}, r.memory_stat.workingset_refault_file)
            if "memory_usage" in on:
                add(majflt, lv, r.memory_stat.pgmajfault)
        if r.memory_events is not None:
            for name in event_names:
                add(events, {**lv, "event": name}, getattr(r.memory_events, name))
    yield from (info, sampled, usage, request, cpu_ent, periods, throttled, throttled_s)
    yield from cpu_p
    yield from (ws, mem_request, mem_ent)
    yield from mem_p
    yield from (refaults, events)
    if "cpu_spec" in on:
        yield from (limit, weight)
    if "memory_usage" in on:
        yield from (mem_usage, majflt)
    if "memory_spec" in on:
        yield from (mem_limit, mem_high)
    if "io_pressure" in on:
        yield from io_p
