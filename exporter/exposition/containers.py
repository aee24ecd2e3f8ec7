"""Per-container families (``cgroup, namespace, pod, container``) from one sampler
snapshot: usage, limits, requests, entitlements, throttling, PSI, memory."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..identity import IDENTITY_LABELS
from ..sampler.snapshot import ContainerSample, Snapshot
from .node import FROM_PASS, add_pressure, pressure_families

LABELS = list(IDENTITY_LABELS)


def _put(fam: GaugeMetricFamily | CounterMetricFamily, labels: list[str], v: float | None) -> None:
    """A series only when the kernel reported the value: absent, never 0, for unknown."""
    if v is not None:
        fam.add_metric(labels, v)


def container_labels(c: ContainerSample) -> list[str]:
    i = c.identity
    return [i.cgroup, i.namespace, i.pod, i.container]


def container_families(snap: Snapshot) -> Iterator[Metric]:
    L = LABELS
    info = GaugeMetricFamily(
        "contention_cgroup_info",
        "A tracked cgroup: its kind, cgroup2 id (inode; the scheduler probe's key) and "
        "Kubernetes identity (always 1).",
        labels=[*L, "kind", "id", "qos", "pod_uid", "container_id"],
    )
    sampled = CounterMetricFamily(
        "contention_sampled_seconds_total",
        "Wall-clock time this exporter has watched the cgroup (the time its counters' "
        "deltas cover; restarts at 0 with the exporter). rate(x[w]) / rate(this[w]) "
        "averages x over the part of w the cgroup was watched, right for young cgroups; "
        "the alert rules judge nothing watched for less than sustainMinutes.",
        labels=L,
    )
    usage = CounterMetricFamily(
        "contention_cpu_usage_seconds_total",
        f"CPU time used by the cgroup (cpu.stat usage_usec).{FROM_PASS}",
        labels=L,
    )
    limit = GaugeMetricFamily(
        "contention_cpu_limit_cores",
        "CPU limit in cores (cpu.max quota/period, v1 cfs_quota_us/cfs_period_us); "
        "absent when unlimited.",
        labels=L,
    )
    request = GaugeMetricFamily(
        "contention_cpu_request_cores",
        "CPU request in cores, from the pod spec (requests are not in the cgroup); "
        "absent when unknown.",
        labels=L,
    )
    cpu_ent = GaugeMetricFamily(
        "contention_cpu_entitlement_cores",
        "What the cgroup's CPU use is measured against: its limit, else its request, else "
        "the node's CPUs (basis says which).",
        labels=[*L, "basis"],
    )
    weight = GaugeMetricFamily(
        "contention_cpu_weight",
        "cpu.weight (1-10000; on cgroup v1 converted from cpu.shares).",
        labels=L,
    )
    periods = CounterMetricFamily(
        "contention_cpu_cfs_periods_total",
        f"CFS bandwidth periods in which the cgroup ran (cpu.stat nr_periods).{FROM_PASS}",
        labels=L,
    )
    throttled = CounterMetricFamily(
        "contention_cpu_cfs_throttled_periods_total",
        "CFS periods in which the cgroup hit its own quota and was throttled (cpu.stat "
        f"nr_throttled).{FROM_PASS}",
        labels=L,
    )
    throttled_s = CounterMetricFamily(
        "contention_cpu_cfs_throttled_seconds_total",
        "Time the cgroup's runnable tasks were throttled by its own quota (cpu.stat "
        f"throttled_usec; v1 throttled_time).{FROM_PASS}",
        labels=L,
    )
    cpu_p = pressure_families("contention_cpu", "CPU", "Cgroup", L)
    mem_p = pressure_families("contention_memory", "memory", "Cgroup", L)
    io_p = pressure_families("contention_io", "IO", "Cgroup", L)
    mem_usage = GaugeMetricFamily(
        "contention_memory_usage_bytes",
        "Memory charged to the cgroup (memory.current; v1 memory.usage_in_bytes).",
        labels=L,
    )
    ws = GaugeMetricFamily(
        "contention_memory_working_set_bytes",
        "Memory usage minus inactive file cache (what the kubelet evicts on).",
        labels=L,
    )
    mem_limit = GaugeMetricFamily(
        "contention_memory_limit_bytes",
        "memory.max (v1 memory.limit_in_bytes); absent when unlimited.",
        labels=L,
    )
    mem_high = GaugeMetricFamily(
        "contention_memory_high_bytes",
        "memory.high throttling boundary; absent when unlimited.",
        labels=L,
    )
    mem_request = GaugeMetricFamily(
        "contention_memory_request_bytes",
        "Memory request from the pod spec; absent when unknown.",
        labels=L,
    )
    mem_ent = GaugeMetricFamily(
        "contention_memory_entitlement_bytes",
        "What memory use is measured against: limit, else request, else node memory.",
        labels=[*L, "basis"],
    )
    refaults = CounterMetricFamily(
        "contention_memory_workingset_refaults_total",
        "Pages read back soon after being reclaimed (memory.stat workingset_refault_*): "
        f"thrashing.{FROM_PASS}",
        labels=[*L, "type"],
    )
    majflt = CounterMetricFamily(
        "contention_memory_major_faults_total",
        f"Major page faults (memory.stat pgmajfault).{FROM_PASS}",
        labels=L,
    )
    events = CounterMetricFamily(
        "contention_memory_events_total",
        "Times the cgroup hit its memory boundaries (memory.events; v1: failcnt as "
        f"event=max).{FROM_PASS}",
        labels=[*L, "event"],
    )
    for c in snap.containers:
        lv = container_labels(c)
        i, r = c.identity, c.reading
        info.add_metric([*lv, i.kind.value, str(c.cgroup_id), i.qos, i.pod_uid, i.container_id], 1)
        sampled.add_metric(lv, c.sampled_s)
        _put(usage, lv, r.cpu_stat.usage_usec / 1e6 if r.cpu_stat is not None else None)
        _put(limit, lv, c.cpu_limit_cores)
        _put(request, lv, i.cpu_request_cores)
        cpu_ent.add_metric([*lv, c.cpu_entitlement.basis], c.cpu_entitlement.value)
        _put(weight, lv, r.cpu_weight)
        _put(periods, lv, c.periods)
        _put(throttled, lv, c.throttled_periods)
        _put(throttled_s, lv, c.throttled_usec / 1e6 if c.throttled_usec is not None else None)
        add_pressure(cpu_p, lv, r.cpu_pressure)
        add_pressure(mem_p, lv, r.memory_pressure)
        add_pressure(io_p, lv, r.io_pressure)
        _put(mem_usage, lv, r.memory_current)
        _put(ws, lv, c.working_set_bytes)
        _put(mem_limit, lv, c.memory_limit_bytes)
        _put(mem_high, lv, r.memory_high)
        _put(mem_request, lv, i.memory_request_bytes)
        if r.memory_current is not None or r.memory_max is not None:
            mem_ent.add_metric([*lv, c.memory_entitlement.basis], c.memory_entitlement.value)
        if r.memory_stat is not None:
            refaults.add_metric([*lv, "anon"], r.memory_stat.workingset_refault_anon)
            refaults.add_metric([*lv, "file"], r.memory_stat.workingset_refault_file)
            majflt.add_metric(lv, r.memory_stat.pgmajfault)
        if r.memory_events is not None:
            e = r.memory_events
            for name, v in (
                ("low", e.low),
                ("high", e.high),
                ("max", e.max),
                ("oom", e.oom),
                ("oom_kill", e.oom_kill),
            ):
                events.add_metric([*lv, name], v)
    yield from (
        info,
        sampled,
        usage,
        limit,
        request,
        cpu_ent,
        weight,
        periods,
        throttled,
        throttled_s,
    )
    yield from cpu_p
    yield from (mem_usage, ws, mem_limit, mem_high, mem_request, mem_ent)
    yield from mem_p
    yield from (refaults, majflt, events)
    yield from io_p
