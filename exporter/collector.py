"""Prometheus exposition of the sampler's latest snapshot.

The node and cgroup families are built on every collect, all from one
:class:`Snapshot`, so a scrape never mixes two passes and never touches the
filesystem; ``extra`` hooks hand over families that were computed once per pass
(probe, findings). Conversions to base units (µs → s, quota → cores) happen here and
nowhere else.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import __version__
from .cgroupfs.model import Pressure
from .identity import IDENTITY_LABELS
from .sampler import ContainerSample, Sampler, Snapshot

LABELS = list(IDENTITY_LABELS)
_SNAP = " From the latest sampler pass."
ExtraFamilies = Callable[[Snapshot], Iterable[Metric]]


def container_labels(c: ContainerSample) -> list[str]:
    i = c.identity
    return [i.cgroup, i.namespace, i.pod, i.container]


class ContentionCollector(Collector):
    """Renders a :class:`Sampler`'s snapshot. ``extra`` hooks add families built from
    the same snapshot (scheduler probe, findings) without this module knowing them."""

    def __init__(self, sampler: Sampler, extra: Iterable[ExtraFamilies] = ()) -> None:
        self.sampler = sampler
        self.extra = list(extra)

    def collect(self) -> Iterator[Metric]:
        t0 = time.perf_counter()
        yield build_info()
        snap = self.sampler.snapshot()
        if snap is None:
            up = GaugeMetricFamily(
                "contention_sampler_ready",
                "1 once the first sampler pass has completed, 0 before.",
            )
            up.add_metric([], 0)
            yield up
            return
        yield from node_families(snap)
        yield from container_families(snap)
        extra_ok = True
        for hook in self.extra:
            try:
                yield from hook(snap)
            except Exception:  # a broken hook loses its own families, not the scrape
                extra_ok = False
        yield from self_families(snap, time.perf_counter() - t0, extra_ok)


def build_info() -> Metric:
    m = GaugeMetricFamily(
        "contention_build_info",
        "Version of contention-exporter and the Python running it (always 1).",
        labels=["version", "python_version"],
    )
    m.add_metric([__version__, platform.python_version()], 1)
    return m


def _pressure_families(
    prefix: str, what: str, scope: str, labels: list[str]
) -> tuple[CounterMetricFamily, CounterMetricFamily]:
    some = CounterMetricFamily(
        f"{prefix}_pressure_waiting_seconds_total",
        f"{scope} time some tasks waited for {what} (PSI 'some' total).{_SNAP}",
        labels=labels,
    )
    full = CounterMetricFamily(
        f"{prefix}_pressure_stalled_seconds_total",
        f"{scope} time all non-idle tasks were stalled on {what} (PSI 'full' total).{_SNAP}",
        labels=labels,
    )
    return some, full


def _add_pressure(
    fams: tuple[CounterMetricFamily, CounterMetricFamily],
    labels: list[str],
    p: Pressure | None,
) -> None:
    if p is None:
        return
    fams[0].add_metric(labels, p.some.total_usec / 1e6)
    if p.full is not None:
        fams[1].add_metric(labels, p.full.total_usec / 1e6)


def node_families(snap: Snapshot) -> Iterator[Metric]:
    f = snap.facts
    info = GaugeMetricFamily(
        "contention_node_info",
        "Node facts detected at start: the cgroup layout in use (always 1).",
        labels=["cgroup_mode"],
    )
    info.add_metric([f.mode.value], 1)
    yield info
    sup = GaugeMetricFamily(
        "contention_node_compute_supported",
        "1 if this node supports the usage and stall layers (cgroup2 with PSI); "
        "0 with the reason otherwise.",
        labels=["reason"],
    )
    sup.add_metric([f.reason], 1 if f.supported else 0)
    yield sup
    psi = GaugeMetricFamily(
        "contention_node_psi_available",
        "1 if pressure stall information is available per cgroup; 0 with the reason.",
        labels=["reason"],
    )
    psi.add_metric([f.psi_reason], 1 if f.psi else 0)
    yield psi
    btf = GaugeMetricFamily(
        "contention_node_btf_available",
        "1 if the kernel exposes BTF (/sys/kernel/btf/vmlinux).",
    )
    btf.add_metric([], 1 if f.btf else 0)
    yield btf

    n = snap.node
    cores = GaugeMetricFamily(
        "contention_node_cpu_cores", "CPUs of the node (the entitlement of last resort)."
    )
    cores.add_metric([], n.cpu_cores)
    yield cores
    if n.memory_bytes:
        mem = GaugeMetricFamily(
            "contention_node_memory_bytes", "Memory of the node (MemTotal in /proc/meminfo)."
        )
        mem.add_metric([], n.memory_bytes)
        yield mem
    if n.proc_stat is not None:
        ctxt = CounterMetricFamily(
            "contention_node_context_switches_total",
            f"Context switches on the node (/proc/stat ctxt).{_SNAP}",
        )
        ctxt.add_metric([], n.proc_stat.ctxt)
        yield ctxt
        steal = CounterMetricFamily(
            "contention_node_cpu_steal_seconds_total",
            "CPU time the hypervisor gave to other guests, summed over CPUs (/proc/stat "
            f"steal).{_SNAP}",
        )
        from .sampler import USER_HZ

        steal.add_metric([], n.proc_stat.steal_ticks / USER_HZ)
        yield steal
    for res, p in (("cpu", n.cpu_pressure), ("memory", n.memory_pressure), ("io", n.io_pressure)):
        fams = _pressure_families(f"contention_node_{res}", res, "Node-wide", [])
        _add_pressure(fams, [], p)
        yield from fams


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
        f"CPU time used by the cgroup (cpu.stat usage_usec).{_SNAP}",
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
        f"CFS bandwidth periods in which the cgroup ran (cpu.stat nr_periods).{_SNAP}",
        labels=L,
    )
    throttled = CounterMetricFamily(
        "contention_cpu_cfs_throttled_periods_total",
        "CFS periods in which the cgroup hit its own quota and was throttled (cpu.stat "
        f"nr_throttled).{_SNAP}",
        labels=L,
    )
    throttled_s = CounterMetricFamily(
        "contention_cpu_cfs_throttled_seconds_total",
        "Time the cgroup's runnable tasks were throttled by its own quota (cpu.stat "
        f"throttled_usec; v1 throttled_time).{_SNAP}",
        labels=L,
    )
    cpu_p = _pressure_families("contention_cpu", "CPU", "Cgroup", L)
    mem_p = _pressure_families("contention_memory", "memory", "Cgroup", L)
    io_p = _pressure_families("contention_io", "IO", "Cgroup", L)
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
        f"thrashing.{_SNAP}",
        labels=[*L, "type"],
    )
    majflt = CounterMetricFamily(
        "contention_memory_major_faults_total",
        f"Major page faults (memory.stat pgmajfault).{_SNAP}",
        labels=L,
    )
    events = CounterMetricFamily(
        "contention_memory_events_total",
        "Times the cgroup hit its memory boundaries (memory.events; v1: failcnt as "
        f"event=max).{_SNAP}",
        labels=[*L, "event"],
    )
    for c in snap.containers:
        lv = container_labels(c)
        i = c.identity
        r = c.reading
        info.add_metric([*lv, i.kind.value, str(c.cgroup_id), i.qos, i.pod_uid, i.container_id], 1)
        sampled.add_metric(lv, c.sampled_s)
        if r.cpu_stat is not None:
            usage.add_metric(lv, r.cpu_stat.usage_usec / 1e6)
        if c.cpu_limit_cores is not None:
            limit.add_metric(lv, c.cpu_limit_cores)
        if i.cpu_request_cores is not None:
            request.add_metric(lv, i.cpu_request_cores)
        cpu_ent.add_metric([*lv, c.cpu_entitlement.basis], c.cpu_entitlement.value)
        if r.cpu_weight is not None:
            weight.add_metric(lv, r.cpu_weight)
        if c.periods is not None:
            periods.add_metric(lv, c.periods)
        if c.throttled_periods is not None:
            throttled.add_metric(lv, c.throttled_periods)
        if c.throttled_usec is not None:
            throttled_s.add_metric(lv, c.throttled_usec / 1e6)
        _add_pressure(cpu_p, lv, r.cpu_pressure)
        _add_pressure(mem_p, lv, r.memory_pressure)
        _add_pressure(io_p, lv, r.io_pressure)
        if r.memory_current is not None:
            mem_usage.add_metric(lv, r.memory_current)
        if c.working_set_bytes is not None:
            ws.add_metric(lv, c.working_set_bytes)
        if c.memory_limit_bytes is not None:
            mem_limit.add_metric(lv, c.memory_limit_bytes)
        if r.memory_high is not None:
            mem_high.add_metric(lv, r.memory_high)
        if i.memory_request_bytes is not None:
            mem_request.add_metric(lv, i.memory_request_bytes)
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


def self_families(snap: Snapshot, render_s: float, extra_ok: bool) -> Iterator[Metric]:
    ready = GaugeMetricFamily(
        "contention_sampler_ready",
        "1 once the first sampler pass has completed, 0 before.",
    )
    ready.add_metric([], 1)
    yield ready
    skipped = CounterMetricFamily(
        "contention_sampler_skipped_cgroups_total",
        "Cgroup reads skipped, by reason: vanished (removed while being read), malformed "
        "(a file not in the kernel's format; logged), error (other I/O errors; logged).",
        labels=["reason"],
    )
    for reason, n in sorted(snap.skipped_total.items()):
        skipped.add_metric([reason], n)
    yield skipped
    passes = CounterMetricFamily(
        "contention_sampler_passes_total", "Sampler passes completed since start."
    )
    passes.add_metric([], snap.passes_total)
    yield passes
    last = GaugeMetricFamily(
        "contention_sampler_last_pass_timestamp_seconds",
        "Unix time of the pass this scrape shows (how fresh the numbers are).",
    )
    last.add_metric([], snap.taken_at)
    yield last
    dur = GaugeMetricFamily(
        "contention_sampler_pass_duration_seconds", "Wall time of the last sampler pass."
    )
    dur.add_metric([], snap.pass_duration_s)
    yield dur
    tracked = GaugeMetricFamily("contention_tracked_cgroups", "Cgroups sampled in the last pass.")
    tracked.add_metric([], len(snap.containers))
    yield tracked
    if snap.identity_staleness_s is not None:
        st = GaugeMetricFamily(
            "contention_metadata_staleness_seconds",
            "Seconds since the identity source (Kubernetes API) was last known good.",
        )
        st.add_metric([], snap.identity_staleness_s)
        yield st
    ok = GaugeMetricFamily(
        "contention_collector_success",
        "1 if the collector's last run succeeded (scrape: whether every family rendered).",
        labels=["collector"],
    )
    d = GaugeMetricFamily(
        "contention_collector_duration_seconds",
        "Duration of the collector's last run (scrape: render time of this response).",
        labels=["collector"],
    )
    for name, st_ in sorted(snap.collectors.items()):
        ok.add_metric([name], 1 if st_.success else 0)
        d.add_metric([name], st_.duration_s)
    ok.add_metric(["scrape"], 1 if extra_ok else 0)
    d.add_metric(["scrape"], render_s)
    yield ok
    yield d
