"""The node's families: build info, node facts, CPU and memory size, context switches,
steal and node-wide PSI, from one sampler snapshot. Conversions to base units happen in
the exposition modules and nowhere else."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .. import __version__
from ..cgroupfs.model import Pressure
from ..cgroupfs.procfs import USER_HZ
from ..revision import revision
from ..sampler.snapshot import Snapshot

FROM_PASS = " From the latest sampler pass."


def build_info() -> Metric:
    m = GaugeMetricFamily(
        "contention_build_info",
        "Version of contention-exporter, the source revision it was built from and the "
        "Python running it (always 1).",
        labels=["version", "revision", "python_version"],
    )
    m.add_metric([__version__, revision(), platform.python_version()], 1)
    return m


def pressure_families(
    prefix: str, what: str, scope: str, labels: list[str]
) -> tuple[CounterMetricFamily, CounterMetricFamily]:
    some = CounterMetricFamily(
        f"{prefix}_pressure_waiting_seconds_total",
        f"{scope} time some tasks waited for {what} (PSI 'some' total).{FROM_PASS}",
        labels=labels,
    )
    full = CounterMetricFamily(
        f"{prefix}_pressure_stalled_seconds_total",
        f"{scope} time all non-idle tasks were stalled on {what} (PSI 'full' total).{FROM_PASS}",
        labels=labels,
    )
    return some, full


def add_pressure(
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
            f"Context switches on the node (/proc/stat ctxt).{FROM_PASS}",
        )
        ctxt.add_metric([], n.proc_stat.ctxt)
        yield ctxt
    if n.proc_stat is not None and n.proc_stat.steal_ticks is not None:
        steal = CounterMetricFamily(
            "contention_node_cpu_steal_seconds_total",
            "CPU time the hypervisor gave to other guests, summed over CPUs (/proc/stat "
            f"steal).{FROM_PASS}",
        )
        steal.add_metric([], n.proc_stat.steal_ticks / USER_HZ)
        yield steal
    for res, p in (("cpu", n.cpu_pressure), ("memory", n.memory_pressure), ("io", n.io_pressure)):
        fams = pressure_families(f"contention_node_{res}", res, "Node-wide", [])
        add_pressure(fams, [], p)
        yield from fams
