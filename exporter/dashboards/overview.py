"""Dashboard 1: node contention overview (uid ``contention-node-overview``)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from .. import promql as pq
from ..findings.thresholds import Thresholds
from ..promql import num, rate, sel
from . import variables as v
from .panels import BLUE, GREEN, ORANGE, RED, Ids, T, bars, big, row, ts, value_map
from .selectors import RATE, Selectors, named
from .shared import (
    DRILLDOWN_UID,
    OVERVIEW_UID,
    base_dashboard,
    field_link,
    findings_table,
)

TITLE = "Contention / Node overview"


def build_overview(th: Thresholds) -> db.Dashboard:
    q = Selectors(th)
    ids = Ids()
    n = q.node
    o = q.overview
    nl = f"{{{{{q.node_label}}}}}"  # legend: the node label of the series
    w = th.window_minutes

    d = (
        base_dashboard(
            q,
            TITLE,
            OVERVIEW_UID,
            "Every container on a node against its CPU and memory entitlement, the worst "
            "victims, active findings, node pressure and probe health.",
        )
        .with_variable(v.node(q, allow_all=False))
        .with_variable(v.namespace(q))
    )

    # -- findings -------------------------------------------------------------------
    d = d.with_row(row(ids, "Active findings"))
    d = d.with_panel(findings_table(ids, q, o, "Active findings on this node"))

    # -- gauges ---------------------------------------------------------------------
    d = d.with_row(row(ids, "Every container against its entitlement"))
    cpu_ratio = named(
        f"{rate(pq.USAGE, RATE, o)}"
        f" / ignoring(basis) group_left(basis) {sel(pq.CPU_ENTITLEMENT, o)}"
    )
    mem_ratio = named(
        f"{sel(pq.WORKING_SET, o)}"
        f" / ignoring(basis) group_left(basis) {sel(pq.MEM_ENTITLEMENT, o)}"
    )
    usage_steps = [(0.8, ORANGE), (1.0, RED)]
    d = d.with_panel(
        bars(
            ids,
            "CPU used / entitlement",
            "CPU each container used, as a share of its entitlement: its CPU limit, else its "
            "request, else the node's cores; the basis is shown after the name. Colours are "
            "display bands (80%, 100%), not alert thresholds. Red against a limit: the "
            "container is at its quota and likely throttled (see the throttling gauge below "
            "and the drill-down). Red against a request: it uses more than it asked for and "
            "can be named as a noisy neighbour; give it a request that reflects its use. "
            "Red against the node: the node's CPUs are busy. Click a bar to drill down.",
            "percentunit",
            [T(cpu_ratio, "{{victim}} · {{basis}}", instant=True)],
            usage_steps,
            h=14,
            max_val=1,
        ).data_links(field_link(q))
    )
    d = d.with_panel(
        bars(
            ids,
            "Memory working set / entitlement",
            "Working set (memory in use minus inactive file cache) of each container, as a "
            "share of its entitlement: its memory limit, else its request, else the node's "
            "memory; the basis is shown after the name. Colours are display bands (80%, "
            "100%). Red against a limit: the container is close to reclaim and OOM at its "
            "own limit (memory-limit-thrash); raise the limit or cut its use. Red against a "
            "request: it grows beyond what it asked for and is a candidate culprit when the "
            "node runs short of memory; set a realistic request. Click a bar to drill down.",
            "percentunit",
            [T(mem_ratio, "{{victim}} · {{basis}}", instant=True)],
            usage_steps,
            h=14,
            max_val=1,
        ).data_links(field_link(q))
    )

    # -- worst victims --------------------------------------------------------------
    d = d.with_row(row(ids, "Worst victims"))
    psi_some = rate(pq.CPU_SOME, "1m", o)
    d = d.with_panel(
        bars(
            ids,
            "Worst CPU pressure (some, last minute)",
            "The ten containers whose tasks spent the largest share of the last minute "
            "runnable but waiting for a CPU (cgroup cpu.pressure 'some'). Red: at or above "
            f"stallSome ({th.stall_some:.0%}), the share at which a minute counts as CPU "
            "stalled for the noisy-neighbor and cpu-contended findings. A red container "
            "that is also throttled is waiting on its own limit; otherwise open the "
            "drill-down to see who ran while it waited.",
            "percentunit",
            [T(f"topk(10, {named(f'{psi_some} > 0')})", "{{victim}}", instant=True)],
            [(th.stall_some, RED)],
            w=8,
            h=10,
            max_val=1,
        ).data_links(field_link(q))
    )
    events = pq.runq_events_per_minute(o)
    worst_p99 = f"{pq.runq_p99('1m', o)} and ({events} >= {num(th.min_runq_events)})"
    d = d.with_panel(
        bars(
            ids,
            "Worst run-queue p99 (last minute)",
            "The ten containers with the highest 99th percentile wait between wakeup and "
            "running on a CPU (scheduler probe), counting only containers with at least "
            f"minRunqEvents ({th.min_runq_events}) wakeups in the minute, as the findings "
            f"do. Orange: at or above runqP99Ms ({th.runq_p99_ms:g} ms), a stalled minute. "
            f"Red: at or above criticalRunqP99Ms ({th.critical_runq_p99_ms:g} ms), critical "
            "severity. Open the drill-down to see the culprits. Empty when the probe is not "
            "loaded (see probe health below).",
            "s",
            [
                T(
                    f"topk(10, {named(worst_p99)})",
                    "{{victim}}",
                    instant=True,
                )
            ],
            [(th.runq_bound_s, ORANGE), (th.critical_runq_bound_s, RED)],
            w=8,
            h=10,
        ).data_links(field_link(q))
    )
    d = d.with_panel(
        bars(
            ids,
            f"Worst CPU throttling ({w}m window)",
            "The ten containers throttled in the largest share of their CFS periods over "
            f"the {w}-minute window. Orange: at or above throttledRatioMax "
            f"({th.throttled_ratio_max:.0%}): the container is never blamed on a neighbour, "
            "its own limit explains its wait. Red: at or above throttledRatio "
            f"({th.throttled_ratio:.0%}): the cpu-throttled finding fires. Fix: raise or "
            "remove the container's CPU limit.",
            "percentunit",
            [
                T(
                    f"topk(10, {named(f'({pq.throttle_ratio(q.window, o)}) > 0')})",
                    "{{victim}}",
                    instant=True,
                )
            ],
            [(th.throttled_ratio_max, ORANGE), (th.throttled_ratio, RED)],
            w=8,
            h=10,
            max_val=1,
        ).data_links(field_link(q))
    )

    caused = rate(pq.ANTAGONIST_WAIT, q.window, n)
    d = d.with_panel(
        bars(
            ids,
            f"Who is hurting this node most ({w}m window)",
            "The culprits that caused the most run-queue wait to the other containers on "
            f"the node over the {w}-minute window, summed over every victim (scheduler "
            "probe: who was on the CPU while they waited). The value is seconds of waiting "
            "per second: 1.5 means that on average one and a half tasks of other "
            "containers were waiting behind it. Only the exporter's top culprits are "
            "exported (--probe.antagonists). A culprit running inside its own CPU request "
            "is entitled to that CPU: check the noisy-neighbor findings above before "
            "acting. Empty when the probe is not loaded.",
            "short",
            [T(f"topk(10, {caused} > 0)", "{{culprit}} ({{culprit_kind}})", instant=True)],
            [(0, BLUE)],
            w=24,
            h=8,
        )
    )

    # -- node -----------------------------------------------------------------------
    d = d.with_row(row(ids, "Node"))
    node_psi = [
        T(
            f"{rate(f'contention_node_{res}_pressure_{kind}_seconds_total', RATE, n)}",
            f"{nl} {res} {label}",
            ref=f"{res}_{label}",
        )
        for res in ("cpu", "io")
        for kind, label in (("waiting", "some"), ("stalled", "full"))
    ]
    d = d.with_panel(
        ts(
            ids,
            "Node CPU and IO pressure",
            "Node-wide pressure stall information (/proc/pressure): the share of time some "
            "task ('some') or every non-idle task ('full') waited for a CPU or for IO. "
            "Sustained CPU 'some' means the node has more runnable work than CPUs: expect "
            "cpu-contended or noisy-neighbor findings, add capacity or spread the workload. "
            "High IO pressure is outside this exporter's findings but slows everything.",
            "percentunit",
            node_psi,
            w=6,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Node memory pressure",
            "Node-wide memory pressure (/proc/pressure/memory). The dashed line is "
            f"nodeMemStallSome ({th.node_mem_stall_some:.0%}) on 'some': above it a "
            "container's memory stall is reported as memory-pressure (the node is short of "
            "memory: set memory requests, add memory); below it as memory-limit-thrash "
            "(the container's own limit is too small).",
            "percentunit",
            [
                T(rate(metric, RATE, n), f"{nl} memory {label}", ref=label)
                for metric, label in (
                    (pq.NODE_MEM_SOME, "some"),
                    ("contention_node_memory_pressure_stalled_seconds_total", "full"),
                )
            ],
            w=6,
            lines=[(th.node_mem_stall_some, ORANGE)],
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Context switches",
            "Context switches per second on the node (/proc/stat), and the sched_switch "
            "events the scheduler probe processed. The probe's cost scales with this rate "
            "(see 'Probe cost per event' below). The two lines should track each other; "
            "the probe line missing means the probe is not loaded.",
            "ops",
            [
                T(
                    f"{rate('contention_node_context_switches_total', RATE, n)}",
                    f"{nl} node",
                    ref="node",
                ),
                T(
                    f"{rate('contention_probe_sched_switches_total', RATE, n)}",
                    f"{nl} seen by probe",
                    ref="probe",
                ),
            ],
            w=6,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "CPU steal",
            "Share of the node's CPU time the hypervisor gave to other guests "
            "(/proc/stat steal over the node's cores). Steal slows every container and no "
            "cgroup on the node is to blame. The orange line is cpuStealRatio: at or above "
            "it for the sustain minutes while a container is stalled waiting for CPU, the "
            "node gets a cpu-steal finding (ContentionCPUSteal). The fix is at the VM level "
            "(another host, larger or dedicated instances), not in Kubernetes. No line: "
            "/proc/stat has no steal column (old kernels).",
            "percentunit",
            [T(pq.steal_ratio(RATE, n), f"{nl}")],
            w=6,
            lines=[(th.cpu_steal_ratio, ORANGE)],
        )
    )

    # -- health ---------------------------------------------------------------------
    d = d.with_row(row(ids, "Exporter and probe health"))
    d = d.with_panel(
        big(
            ids,
            "Usage and stall layers",
            "Whether this node supports the usage and stall layers (cgroup2 with PSI; the "
            "name shows the reason when not). Red: no per-container series on this node; "
            "cgroup v1-only nodes and kernels booted with psi=0 are not supported.",
            "none",
            [T(sel("contention_node_compute_supported", n), "{{reason}}", instant=True)],
            mappings=[value_map({"1": ("supported", GREEN), "0": ("not supported", RED)})],
        )
    )
    d = d.with_panel(
        big(
            ids,
            "Scheduler probe",
            "Whether the eBPF scheduler probe is attached. The name shows the loader (core: "
            "the CO-RE object through libbpf; bcc: the fallback) and the reason: why it is "
            "not loaded, or why CO-RE did not load when BCC did. Without it there is no "
            "run-queue latency and no blame: stall findings still fire, but never "
            "noisy-neighbor. Orange: check the exporter log and its capabilities (CAP_BPF, "
            "CAP_PERFMON), the kernel's BTF and libbpf (or, for BCC, kernel headers and "
            "tracefs); docs/troubleshooting.md lists every reason.",
            "none",
            [T(sel(pq.PROBE_LOADED, n), "{{loader}} {{reason}}", instant=True)],
            mappings=[value_map({"1": ("loaded", GREEN), "0": ("not loaded", ORANGE)})],
        )
    )
    d = d.with_panel(
        big(
            ids,
            "Unknown blame share",
            "Share of all victims' run-queue wait over the window that the probe could not "
            "attribute to a known cgroup (unresolved ids, or wait its slice ring missed). "
            "Display bands 20% / 50%. Red: attribution on this node is unreliable, treat "
            "culprit names with care and check the exporter log.",
            "percentunit",
            [T(sel(pq.UNKNOWN_BLAME, n), nl, instant=True)],
            [(0.2, ORANGE), (0.5, RED)],
        )
    )
    d = d.with_panel(
        big(
            ids,
            "Last sampler pass",
            "Seconds since the exporter's last complete pass over the cgroups. Red (over two "
            "minutes): the sampler is stuck or the exporter is overloaded; the numbers on "
            "this dashboard are stale. Check /healthz and the exporter log.",
            "s",
            [
                T(
                    f"time() - {sel(pq.LAST_PASS, n)}",
                    nl,
                    instant=True,
                )
            ],
            [(30, ORANGE), (120, RED)],
        )
    )
    d = d.with_panel(
        big(
            ids,
            "Failing collectors",
            "Collectors whose last run failed (contention_collector_success == 0). Red: "
            "some series are missing; the exporter log names the collector and the error.",
            "none",
            [
                T(
                    f"sum {q.by()} (1 - {sel(pq.COLLECTOR_SUCCESS, n)})",
                    nl,
                    instant=True,
                )
            ],
            [(1, RED)],
        )
    )
    d = d.with_panel(
        big(
            ids,
            "Tracked cgroups",
            "Cgroups sampled in the last pass (containers, systemd units, other leaf "
            "cgroups). Informational; a sudden drop to zero means discovery failed.",
            "none",
            [T(sel("contention_tracked_cgroups", n), nl, instant=True)],
            base=BLUE,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Probe cost per event",
            "Average kernel time per run of each probe program (needs "
            "kernel.bpf_stats_enabled=1, else no data). Multiply by the context-switch "
            "rate for the probe's CPU cost. A few hundred nanoseconds is expected; "
            "microseconds mean the probe is a real load on a busy node.",
            "s",
            [
                T(
                    f"{rate('contention_probe_program_run_seconds_total', RATE, n)}"
                    f" / {rate('contention_probe_program_runs_total', RATE, n)}",
                    f"{nl} {{{{program}}}}",
                )
            ],
            w=8,
        )
    )
    d = d.with_panel(
        bars(
            ids,
            "Probe map occupancy",
            "Entries in each BPF map as a share of its capacity. Orange at 80%, red at 95%: "
            "a full map drops events (see update failures); raise the map size knob.",
            "percentunit",
            [
                T(
                    f"{sel('contention_probe_map_entries', n)}"
                    f" / {sel('contention_probe_map_capacity', n)}",
                    f"{nl} {{{{map}}}}",
                    instant=True,
                )
            ],
            [(0.8, ORANGE), (0.95, RED)],
            w=8,
            h=8,
            max_val=1,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Probe map update failures",
            "Inserts into a probe map that failed per second (map full): those events are "
            "lost and blame is incomplete. Any sustained non-zero rate: raise that map's "
            "size.",
            "ops",
            [
                T(
                    rate(pq.PROBE_MAP_FAILURES, RATE, n),
                    f"{nl} {{{{map}}}}",
                )
            ],
            w=8,
        )
    )
    return d


__all__ = ["DRILLDOWN_UID", "OVERVIEW_UID", "TITLE", "build_overview"]
