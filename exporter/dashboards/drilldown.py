"""Dashboard 2: pod / container drill-down (uid ``contention-container-drilldown``)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, nodegraph
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import nodegraph as ngm
from grafana_foundation_sdk.models import prometheus as pm

from .. import promql as pq
from ..findings.thresholds import Thresholds
from ..promql import rate, sel
from . import variables as v
from .panels import (
    BLUE,
    DS,
    GREEN,
    ORANGE,
    RED,
    Ids,
    T,
    prop,
    row,
    target,
    transform,
    ts,
)
from .selectors import RATE, Selectors, named, named_culprit
from .shared import (
    DRILLDOWN_UID,
    OVERVIEW_UID,
    base_dashboard,
    findings_table,
)

TITLE = "Contention / Container drill-down"

CORES = "suffix: cores"
VICTIM = "{{victim}}"
# The limit, where there is one, is the entitlement's basis (docs/metrics.md): the
# limit gauges themselves are optional (--collector.cpu_spec, memory_spec).
LIMIT = 'basis="limit"'


def _dashed(regex: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    return regex, [
        prop("custom.lineStyle", {"fill": "dash", "dash": [10, 10]}),
        prop("custom.fillOpacity", 0),
    ]


def build_drilldown(th: Thresholds) -> db.Dashboard:
    q = Selectors(th)
    ids = Ids()
    c = q.container
    w = th.window_minutes

    d = (
        base_dashboard(
            q,
            TITLE,
            DRILLDOWN_UID,
            "One container (or several): usage against request and limit, throttling, CPU "
            "and memory pressure, run-queue latency, who ran while it waited, memory "
            "reclaim. In host mode leave namespace/pod/container on 'All' and pick a "
            "cgroup.",
        )
        .with_variable(v.node(q, allow_all=True))
        .with_variable(v.namespace(q))
        .with_variable(v.pod(q))
        .with_variable(v.container(q))
        .with_variable(v.cgroup(q))
    )

    d = d.with_row(row(ids, "Findings"))
    d = d.with_panel(findings_table(ids, q, c, "Active findings for this selection", h=6))

    # -- CPU ------------------------------------------------------------------------
    d = d.with_row(row(ids, "CPU"))
    d = d.with_panel(
        ts(
            ids,
            "CPU used vs request vs limit",
            "CPU the container used (cores), with its request (dashed, from the pod spec or "
            "the metadata file) and its CPU limit (dashed, cpu.max or the v1 quota: the "
            "entitlement when its basis is the limit). Used "
            "at the limit: it is throttled, see the next panel. Used well above the "
            "request: it is running on CPU nobody reserved for it and can be named as a "
            "noisy neighbour of others; give it a request that reflects its use.",
            CORES,
            [
                T(
                    named(rate(pq.USAGE, RATE, c)),
                    f"{VICTIM} used",
                    ref="used",
                ),
                T(
                    named(sel(pq.CPU_REQUEST, c)),
                    f"{VICTIM} request",
                    ref="request",
                ),
                T(named(sel(pq.CPU_ENTITLEMENT, c, LIMIT)), f"{VICTIM} limit", ref="limit"),
            ],
        )
        .override_by_regexp(*_dashed(".* request$"))
        .override_by_regexp(*_dashed(".* limit$"))
    )
    d = d.with_panel(
        ts(
            ids,
            f"Throttled periods ({w}m window)",
            "Share of CFS enforcement periods in which the container hit its own CPU quota, "
            f"over the findings window ({w} minutes), exactly as the alerts compute it. "
            f"Orange line: throttledRatioMax ({th.throttled_ratio_max:.0%}); above it the "
            "container is never blamed on a neighbour, its own limit explains the wait. Red "
            f"line: throttledRatio ({th.throttled_ratio:.0%}); above it cpu-throttled fires. "
            "Fix: raise or remove resources.limits.cpu.",
            "percentunit",
            [T(named(pq.throttle_ratio(q.window, c)), VICTIM)],
            lines=[(th.throttled_ratio_max, ORANGE), (th.throttled_ratio, RED)],
            max_val=1,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Throttled time",
            "Seconds per second the container's tasks spent throttled (cpu.stat "
            "throttled_usec, v1 throttled_time). Unlike the ratio this grows with the "
            "number of threads held back. Non-zero while the ratio is red: the limit is "
            "too small for its bursts.",
            "s",
            [
                T(
                    named(rate(pq.THROTTLED_SECONDS, RATE, c)),
                    VICTIM,
                )
            ],
            w=8,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "CPU pressure some (per minute)",
            "Share of each minute in which at least one of the container's tasks was "
            "runnable but not running (cgroup cpu.pressure 'some'), as the findings compute "
            f"it. Red line: stallSome ({th.stall_some:.0%}); a minute above it counts as "
            f"stalled, and {th.sustain_minutes} stalled minutes in a row make a "
            "noisy-neighbor or cpu-contended finding (unless the container throttles "
            "itself). Throttling also shows here: check the throttle panel first.",
            "percentunit",
            [
                T(
                    named(rate(pq.CPU_SOME, "1m", c)),
                    VICTIM,
                )
            ],
            w=8,
            lines=[(th.stall_some, RED)],
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "CPU pressure full (per minute)",
            "Share of each minute in which all of the container's non-idle tasks were "
            "waiting for a CPU (cgroup cpu.pressure 'full'). Red line: criticalCpuFull "
            f"({th.critical_cpu_full:.0%}); above it a CPU finding on this container is "
            "critical. The container makes no progress at all during these stalls.",
            "percentunit",
            [
                T(
                    named(rate(pq.CPU_FULL, "1m", c)),
                    VICTIM,
                )
            ],
            w=8,
            lines=[(th.critical_cpu_full, RED)],
        )
    )

    # -- run queue ------------------------------------------------------------------
    d = d.with_row(row(ids, "Run queue (scheduler probe)"))
    bucket = sel(pq.RUNQ_BUCKET, c)
    d = d.with_panel(
        heatmap.Panel()
        .id(ids())
        .title("Run-queue latency")
        .description(
            "How long the container's tasks waited between becoming runnable and getting a "
            "CPU, per wakeup, as a heatmap of the probe's histogram buckets (wakeups per "
            "second per bucket). Mass in the rows at and above "
            f"{th.runq_p99_ms:g} ms is what a stalled minute looks like; mass above "
            f"{th.critical_runq_p99_ms:g} ms is critical. No data: the probe is not loaded."
        )
        .datasource(DS)
        .unit("s")
        .span(12)
        .height(8)
        .with_target(
            target(
                T(
                    f"sum by(le) (rate({bucket}[{RATE}]))",
                    "{{le}}",
                    fmt=pm.PromQueryFormat.HEATMAP,
                )
            )
        )
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("s").decimals(0))
        .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(hm.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .scale(hm.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
        )
        .cell_values(heatmap.CellValues().unit("suffix: wakeups/s"))
        .mode(cm.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
        .show_legend()
    )
    d = d.with_panel(
        ts(
            ids,
            "Run-queue p99 (per minute)",
            "99th percentile of the run-queue wait in each minute, from the histogram as "
            "the alerts compute it (20 ms and 200 ms are exact bucket bounds). Orange line: "
            f"runqP99Ms ({th.runq_p99_ms:g} ms), a stalled minute when there were enough "
            "wakeups (next panel). Red line: criticalRunqP99Ms "
            f"({th.critical_runq_p99_ms:g} ms), critical severity. Above the lines and not "
            "throttled: see who ran while it waited, below.",
            "s",
            [T(named(pq.runq_p99("1m", c)), VICTIM)],
            lines=[(th.runq_bound_s, ORANGE), (th.critical_runq_bound_s, RED)],
            min_val=None,
            log=True,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Wakeups per minute",
            "Run-queue events (wakeups that waited for a CPU) per minute. A p99 only counts "
            f"as stalled with at least minRunqEvents ({th.min_runq_events}) of them in the "
            "minute (dashed line), so a near-idle sidecar's few slow wakeups cannot fire a "
            "finding; a wait beyond the largest bucket counts regardless.",
            "short",
            [
                T(
                    named(pq.runq_events_per_minute(c)),
                    VICTIM,
                )
            ],
            lines=[(th.min_runq_events, GREEN)],
            base=BLUE,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Time waiting for a CPU",
            "Seconds per second the container's tasks spent runnable in a run queue (sum "
            "of all waits). 1.0 means one task's worth of time lost every second. Rising "
            "with flat CPU usage: the container is being starved.",
            "s",
            [
                T(
                    named(rate(pq.RUNQ_SUM, RATE, c)),
                    VICTIM,
                )
            ],
        )
    )

    # -- blame ----------------------------------------------------------------------
    d = d.with_row(row(ids, "Who ran while it waited"))
    d = d.with_panel(
        ts(
            ids,
            f"Top culprits' share of the wait ({w}m window)",
            "For each of the container's top culprits, the share of its run-queue wait over "
            f"the window spent behind that cgroup. Red line: blameShare ({th.blame_share:.0%}). "
            "A culprit above it that uses more CPU than it requested (or has no request) is "
            "named in a noisy-neighbor finding: lower its usage, give it a request that "
            "reflects it, or move one of the two. 'idle' means the CPU ran idle while the "
            "container waited: its own quota, not a neighbour; 'kernel' is kernel threads; "
            "'unknown' is wait the probe could not attribute. '(workload)' lines are the "
            "containers of one Deployment, CronJob, ... together, running or gone: named "
            "when no single container passes but they do together.",
            "percentunit",
            [
                T(
                    named(sel(pq.BLAME_SHARE, c)),
                    f"{VICTIM} ← {{{{culprit}}}} ({{{{culprit_kind}}}})",
                ),
                T(
                    named(sel(pq.WORKLOAD_BLAME_SHARE, c)),
                    f"{VICTIM} ← {{{{culprit}}}} ({{{{culprit_kind}}}})",
                    ref="B",
                ),
            ],
            lines=[(th.blame_share, RED)],
            max_val=1,
            h=10,
        )
    )
    edges = named_culprit(named(sel(pq.BLAME_SHARE, c)))
    edges = f'label_replace({edges}, "source", "$1", "victim", "(.*)")'
    edges = f'label_join({edges}, "id", " -> ", "source", "target")'
    edges = f'label_replace({edges}, "detail__culprit_kind", "$1", "culprit_kind", "(.*)")'
    edges = f"max by(id, source, target, detail__culprit_kind) ({edges}) * 100"
    d = d.with_panel(
        nodegraph.Panel()
        .id(ids())
        .title(f"Victim → culprit ({w}m window)")
        .description(
            "The blame matrix as a graph: an arrow from each selected container (victim) to "
            "each of its top culprits, labelled with the culprit's share (%) of the "
            "victim's run-queue wait over the window. A culprit with several incoming "
            f"arrows slows several containers. An arrow above {th.blame_share:.0%} from a "
            "culprit running beyond its CPU request is a noisy-neighbor finding. Pick one "
            "node: in host mode the same cgroup path on two nodes is drawn as one circle."
        )
        .datasource(DS)
        .unit("percent")
        .span(12)
        .height(10)
        .with_target(target(T(edges, ref="edges", instant=True, fmt=pm.PromQueryFormat.TABLE)))
        .with_transformation(
            transform("renameByRegex", {"regex": "Value.*", "renamePattern": "mainstat"})
        )
        .edges(nodegraph.EdgeOptions().main_stat_unit("%"))
        .nodes(nodegraph.NodeOptions().main_stat_unit("%"))
        .zoom_mode(ngm.ZoomMode.COOPERATIVE)
    )

    # -- memory ---------------------------------------------------------------------
    d = d.with_row(row(ids, "Memory"))
    d = d.with_panel(
        ts(
            ids,
            "Memory working set vs request vs limit",
            "Working set (in use minus inactive file cache), with the memory request "
            "(dashed) and the limit (dashed: the entitlement when its basis is the limit). "
            "Working set near "
            "the limit: the kernel reclaims the container's own pages and may OOM-kill it "
            "(see limit hits below); raise resources.limits.memory. Working set well above "
            "the request: a candidate culprit when the node runs short of memory.",
            "bytes",
            [
                T(
                    named(sel(pq.WORKING_SET, c)),
                    f"{VICTIM} working set",
                    ref="ws",
                ),
                T(
                    named(sel(pq.MEM_REQUEST, c)),
                    f"{VICTIM} request",
                    ref="request",
                ),
                T(named(sel(pq.MEM_ENTITLEMENT, c, LIMIT)), f"{VICTIM} limit", ref="limit"),
            ],
        ).override_by_regexp(*_dashed(".* (request|limit)$"))
    )
    d = d.with_panel(
        ts(
            ids,
            "Memory pressure some (per minute)",
            "Share of each minute in which some of the container's tasks stalled on memory "
            "(reclaim, refaults, swap-in; cgroup memory.pressure 'some'). Red line: "
            f"memStallSome ({th.mem_stall_some:.0%}); a minute above it (or with refaults "
            "above their line) counts as memory-stalled. Whether it becomes memory-pressure "
            "or memory-limit-thrash depends on the node (panel below).",
            "percentunit",
            [
                T(
                    named(rate(pq.MEM_SOME, "1m", c)),
                    VICTIM,
                )
            ],
            w=6,
            lines=[(th.mem_stall_some, RED)],
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Memory pressure full (per minute)",
            "Share of each minute in which all of the container's non-idle tasks stalled on "
            f"memory. Red line: criticalMemFull ({th.critical_mem_full:.0%}); above it a "
            "memory finding on this container is critical.",
            "percentunit",
            [
                T(
                    named(rate(pq.MEM_FULL, "1m", c)),
                    VICTIM,
                )
            ],
            w=6,
            lines=[(th.critical_mem_full, RED)],
        )
    )
    limit_events = sel(pq.MEM_EVENTS, c, 'event=~"high|max|oom|oom_kill"')
    d = d.with_panel(
        ts(
            ids,
            "Workingset refaults per minute",
            "Pages the container had to read back soon after the kernel evicted them "
            "(anon + file), per minute: the container's working set does not fit. Red line: "
            f"refaultPerMin ({th.refault_per_min:g}); a minute above it counts as "
            "memory-stalled.",
            "short",
            [T(named(f"{pq.refaults('1m', c)} * 60"), VICTIM)],
            w=8,
            lines=[(th.refault_per_min, RED)],
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Memory limit hits per minute",
            "memory.events per minute: 'high' (throttled at memory.high), 'max' (hit the "
            "limit and reclaimed), and 'oom' and 'oom_kill' when the exporter runs with "
            "--collector.memory_oom. high/max rising together with memory stall while the "
            "node is not short of memory is memory-limit-thrash: raise "
            "resources.limits.memory. Any oom_kill: the container lost a process.",
            "short",
            [
                T(
                    named(f"rate({limit_events}[{RATE}]) * 60"),
                    f"{VICTIM} {{{{event}}}}",
                )
            ],
            w=8,
        )
    )
    d = d.with_panel(
        ts(
            ids,
            "Node memory pressure (some, per minute)",
            "Memory pressure of the whole node. Dashed line: nodeMemStallSome "
            f"({th.node_mem_stall_some:.0%}). A memory-stalled container becomes "
            "memory-pressure above it (the node is short: set memory requests, add memory) "
            "and memory-limit-thrash below it (its own limit is too small).",
            "percentunit",
            [
                T(
                    rate(pq.NODE_MEM_SOME, "1m", q.node),
                    f"{{{{{q.node_label}}}}}",
                )
            ],
            w=8,
            lines=[(th.node_mem_stall_some, ORANGE)],
        )
    )
    return d


__all__ = ["DRILLDOWN_UID", "OVERVIEW_UID", "TITLE", "build_drilldown"]
