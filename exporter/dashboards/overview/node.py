"""Overview row: the node as a whole: its CPU, IO and memory pressure, context
switches and CPU steal."""

from __future__ import annotations

from grafana_foundation_sdk.builders import timeseries

from ... import promql as pq
from ...promql import rate
from ..layout import Context, Row
from ..panels import ORANGE, Query, timeseries_panel
from ..selectors import RATE

# PSI's two lines, in the order of ``pq.NODE_PSI``: the ``waiting`` counter is 'some',
# ``stalled`` is 'full'.
PSI_KINDS = ("some", "full")


def cpu_and_io_pressure(context: Context) -> timeseries.Panel:
    node, legend = context.selectors.node, context.selectors.node_legend
    queries = [
        Query(
            rate(metric, RATE, node),
            f"{legend} {resource} {label}",
            ref=f"{resource}_{label}",
        )
        for resource in ("cpu", "io")
        for metric, label in zip(pq.NODE_PSI[resource], PSI_KINDS, strict=True)
    ]
    return timeseries_panel(
        context.ids,
        "Node CPU and IO pressure",
        "Node-wide pressure stall information (/proc/pressure): the share of time some "
        "task ('some') or every non-idle task ('full') waited for a CPU or for IO. "
        "Sustained CPU 'some' means the node has more runnable work than CPUs: expect "
        "cpu-contended or noisy-neighbor findings, add capacity or spread the workload. "
        "High IO pressure is outside this exporter's findings but slows everything.",
        "percentunit",
        queries,
        width=6,
    )


def memory_pressure(context: Context) -> timeseries.Panel:
    th = context.th
    node, legend = context.selectors.node, context.selectors.node_legend
    metrics = zip(pq.NODE_PSI["memory"], PSI_KINDS, strict=True)
    return timeseries_panel(
        context.ids,
        "Node memory pressure",
        "Node-wide memory pressure (/proc/pressure/memory). The dashed line is "
        f"nodeMemStallSome ({th.node_mem_stall_some:.0%}) on 'some': above it a "
        "container's memory stall is reported as memory-pressure (the node is short of "
        "memory: set memory requests, add memory); below it as memory-limit-thrash "
        "(the container's own limit is too small).",
        "percentunit",
        [
            Query(rate(metric, RATE, node), f"{legend} memory {label}", ref=label)
            for metric, label in metrics
        ],
        width=6,
        lines=[(th.node_mem_stall_some, ORANGE)],
    )


def context_switches(context: Context) -> timeseries.Panel:
    node, legend = context.selectors.node, context.selectors.node_legend
    return timeseries_panel(
        context.ids,
        "Context switches",
        "Context switches per second on the node (/proc/stat), and the sched_switch "
        "events the scheduler probe processed. The probe's cost scales with this rate "
        "(see 'Probe cost per event' below). The two lines should track each other; "
        "the probe line missing means the probe is not loaded.",
        "ops",
        [
            Query(
                rate(pq.NODE_CONTEXT_SWITCHES, RATE, node),
                f"{legend} node",
                ref="node",
            ),
            Query(
                rate(pq.PROBE_SCHED_SWITCHES, RATE, node),
                f"{legend} seen by probe",
                ref="probe",
            ),
        ],
        width=6,
    )


def cpu_steal(context: Context) -> timeseries.Panel:
    selectors = context.selectors
    return timeseries_panel(
        context.ids,
        "CPU steal",
        "Share of the node's CPU time the hypervisor gave to other guests "
        "(/proc/stat steal over the node's cores). Steal slows every container and no "
        "cgroup on the node is to blame. The orange line is cpuStealRatio: at or above "
        "it for the sustain minutes while a container is stalled waiting for CPU, the "
        "node gets a cpu-steal finding (ContentionCPUSteal). The fix is at the VM level "
        "(another host, larger or dedicated instances), not in Kubernetes. No line: "
        "/proc/stat has no steal column (old kernels).",
        "percentunit",
        [Query(pq.steal_ratio(RATE, selectors.node), selectors.node_legend)],
        width=6,
        lines=[(context.th.cpu_steal_ratio, ORANGE)],
    )


ROW = Row("Node", (cpu_and_io_pressure, memory_pressure, context_switches, cpu_steal))
