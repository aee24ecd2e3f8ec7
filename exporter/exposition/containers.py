"""The per-container collectors: ``containers`` (on by default: usage, requests,
entitlements, throttling, PSI, memory) and the optional ``cpu_spec``, ``memory_usage``,
``memory_spec`` and ``io_pressure`` (``--collector.<name>``; ``memory_oom`` adds
event values to ``contention_memory_events_total``). Families and labels:
``exporter.catalog.containers``; the values: the sampler's snapshot
(``sampler.snapshot.ContainerSample``: the reading and what the sampler computed).

Each series carries the container's identity labels (``Identity.series_labels``: its
names, or its cgroup path) and nothing empty; ``contention_cgroup_info`` carries the
rest (path, cgroup id, pod UID, container ID, QoS). A series exists only when the
kernel reported the value: absent, never 0, for unknown.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from ..catalog import containers as C
from ..cgroupfs.model import Pressure
from ..sampler.snapshot import ContainerSample
from .inputs import Context
from .series import add, new


def _put(fam: Metric, labels: dict[str, str], v: float | None) -> None:
    """A series only when the kernel reported the value: absent, never 0, for unknown."""
    if v is not None:
        add(fam, labels, v)


def _add_pressure(some: Metric, full: Metric, lv: dict[str, str], p: Pressure | None) -> None:
    if p is None:
        return
    add(some, lv, p.some.total_usec / 1e6)
    if p.full is not None:
        add(full, lv, p.full.total_usec / 1e6)


def _series(ctx: Context) -> Iterator[tuple[ContainerSample, dict[str, str]]]:
    """Every tracked container with its identity labels in this pass."""
    for c in ctx.snapshot.containers:
        yield c, c.identity.series_labels(ctx.ambiguous)


def _info_labels(c: ContainerSample) -> dict[str, str]:
    i = c.identity
    meta = {"id": i.cgroup, "cgroup_id": str(c.cgroup_id), "kind": i.kind.value}
    extra = (("qos", i.qos), ("uid", i.pod_uid), ("workload", i.workload))
    meta.update((k, v) for k, v in extra if v)
    if i.container_id:
        meta["container_id"] = i.container_uri
    return meta


class _Cpu:
    """Usage, request, entitlement, CFS bandwidth and CPU PSI."""

    def __init__(self) -> None:
        self.usage = new(C.CPU_USAGE_SECONDS)
        self.request = new(C.CPU_REQUEST_CORES)
        self.entitlement = new(C.CPU_ENTITLEMENT_CORES)
        self.periods = new(C.CPU_CFS_PERIODS)
        self.throttled = new(C.CPU_CFS_THROTTLED_PERIODS)
        self.throttled_s = new(C.CPU_CFS_THROTTLED_SECONDS)
        self.some = new(C.CPU_PRESSURE_WAITING_SECONDS)
        self.full = new(C.CPU_PRESSURE_STALLED_SECONDS)

    def add(self, c: ContainerSample, lv: dict[str, str]) -> None:
        r = c.reading
        _put(self.usage, lv, r.cpu_stat.usage_usec / 1e6 if r.cpu_stat is not None else None)
        _put(self.request, lv, c.identity.cpu_request_cores)
        add(self.entitlement, {**lv, "basis": c.cpu_entitlement.basis}, c.cpu_entitlement.value)
        _put(self.periods, lv, c.periods)
        _put(self.throttled, lv, c.throttled_periods)
        throttled_s = c.throttled_usec / 1e6 if c.throttled_usec is not None else None
        _put(self.throttled_s, lv, throttled_s)
        _add_pressure(self.some, self.full, lv, r.cpu_pressure)

    def families(self) -> list[Metric]:
        return [
            self.usage,
            self.request,
            self.entitlement,
            self.periods,
            self.throttled,
            self.throttled_s,
            self.some,
            self.full,
        ]


class _Memory:
    """Working set, request, entitlement, memory PSI, refaults and memory events."""

    def __init__(self, events: tuple[str, ...]) -> None:
        self.working_set = new(C.MEMORY_WORKING_SET_BYTES)
        self.request = new(C.MEMORY_REQUEST_BYTES)
        self.entitlement = new(C.MEMORY_ENTITLEMENT_BYTES)
        self.some = new(C.MEMORY_PRESSURE_WAITING_SECONDS)
        self.full = new(C.MEMORY_PRESSURE_STALLED_SECONDS)
        self.refaults = new(C.MEMORY_WORKINGSET_REFAULTS)
        self.events = new(C.MEMORY_EVENTS)
        self.event_names = events

    def add(self, c: ContainerSample, lv: dict[str, str]) -> None:
        r = c.reading
        _put(self.working_set, lv, c.working_set_bytes)
        _put(self.request, lv, c.identity.memory_request_bytes)
        me = c.memory_entitlement
        # The node's memory unknown (/proc/meminfo unreadable): no series, not a 0.
        known = me.basis != "node" or me.value > 0
        if known and (r.memory_current is not None or r.memory_max is not None):
            add(self.entitlement, {**lv, "basis": me.basis}, me.value)
        _add_pressure(self.some, self.full, lv, r.memory_pressure)
        if r.memory_stat is not None:
            add(self.refaults, {**lv, "type": "anon"}, r.memory_stat.workingset_refault_anon)
            add(self.refaults, {**lv, "type": "file"}, r.memory_stat.workingset_refault_file)
        if r.memory_events is not None:
            for name in self.event_names:
                add(self.events, {**lv, "event": name}, getattr(r.memory_events, name))

    def families(self) -> list[Metric]:
        return [
            self.working_set,
            self.request,
            self.entitlement,
            self.some,
            self.full,
            self.refaults,
            self.events,
        ]


def containers(ctx: Context) -> list[Metric]:
    """The ``containers`` collector: every tracked container's default families."""
    info, sampled = new(C.CGROUP_INFO), new(C.SAMPLED_SECONDS)
    cpu, memory = _Cpu(), _Memory(C.MEMORY_EVENTS.values("event", ctx.enabled))
    for c, lv in _series(ctx):
        add(info, {**lv, **_info_labels(c)}, 1)
        add(sampled, lv, c.sampled_s)
        cpu.add(c, lv)
        memory.add(c, lv)
    return [info, sampled, *cpu.families(), *memory.families()]


def cpu_spec(ctx: Context) -> list[Metric]:
    limit, weight = new(C.CPU_LIMIT_CORES), new(C.CPU_WEIGHT)
    for c, lv in _series(ctx):
        _put(limit, lv, c.cpu_limit_cores)
        _put(weight, lv, c.reading.cpu_weight)
    return [limit, weight]


def memory_usage(ctx: Context) -> list[Metric]:
    usage, majflt = new(C.MEMORY_USAGE_BYTES), new(C.MEMORY_MAJOR_FAULTS)
    for c, lv in _series(ctx):
        r = c.reading
        _put(usage, lv, r.memory_current)
        if r.memory_stat is not None:
            add(majflt, lv, r.memory_stat.pgmajfault)
    return [usage, majflt]


def memory_spec(ctx: Context) -> list[Metric]:
    limit, high = new(C.MEMORY_LIMIT_BYTES), new(C.MEMORY_HIGH_BYTES)
    for c, lv in _series(ctx):
        _put(limit, lv, c.memory_limit_bytes)
        _put(high, lv, c.reading.memory_high)
    return [limit, high]


def io_pressure(ctx: Context) -> list[Metric]:
    some, full = new(C.IO_PRESSURE_WAITING_SECONDS), new(C.IO_PRESSURE_STALLED_SECONDS)
    for c, lv in _series(ctx):
        _add_pressure(some, full, lv, c.reading.io_pressure)
    return [some, full]
