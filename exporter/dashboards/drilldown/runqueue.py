"""Drill-down row: the container's run queue, from the scheduler probe: the latency
heatmap, the p99 the findings use, wakeups, and the time spent waiting."""

from __future__ import annotations

from grafana_foundation_sdk.builders import heatmap, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

from ... import promql as pq
from ...promql import rate, sel
from ..layout import Context, Row
from ..panels import (
    BLUE,
    DS,
    GREEN,
    ORANGE,
    RED,
    Query,
    target,
    timeseries_panel,
    victim_query,
)
from ..selectors import RATE


def latency_heatmap(context: Context) -> heatmap.Panel:
    th = context.th
    bucket = sel(pq.RUNQ_BUCKET, context.selectors.container)
    per_bucket = Query(
        f"sum by(le) (rate({bucket}[{RATE}]))", "{{le}}", fmt=pm.PromQueryFormat.HEATMAP
    )
    return (
        heatmap.Panel()
        .id(context.ids())
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
        .with_target(target(per_bucket))
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


def p99(context: Context) -> timeseries.Panel:
    th = context.th
    return timeseries_panel(
        context.ids,
        "Run-queue p99 (per minute)",
        "99th percentile of the run-queue wait in each minute, from the histogram as "
        "the alerts compute it (20 ms and 200 ms are exact bucket bounds). Orange line: "
        f"runqP99Ms ({th.runq_p99_ms:g} ms), a stalled minute when there were enough "
        "wakeups (next panel). Red line: criticalRunqP99Ms "
        f"({th.critical_runq_p99_ms:g} ms), the critical level. Above the lines and not "
        "throttled: see who ran while it waited, below.",
        "s",
        [victim_query(pq.runq_p99("1m", context.selectors.container))],
        lines=[(th.runq_bound_s, ORANGE), (th.critical_runq_bound_s, RED)],
        min_val=None,
        log=True,
    )


def wakeups(context: Context) -> timeseries.Panel:
    th = context.th
    return timeseries_panel(
        context.ids,
        "Wakeups per minute",
        "Run-queue events (wakeups that waited for a CPU) per minute. A p99 only counts "
        f"as stalled with at least minRunqEvents ({th.min_runq_events}) of them in the "
        "minute (dashed line), so a near-idle sidecar's few slow wakeups cannot fire a "
        "finding; a wait beyond the largest bucket counts regardless.",
        "short",
        [victim_query(pq.runq_events_per_minute(context.selectors.container))],
        lines=[(th.min_runq_events, GREEN)],
        base=BLUE,
    )


def time_waiting(context: Context) -> timeseries.Panel:
    return timeseries_panel(
        context.ids,
        "Time waiting for a CPU",
        "Seconds per second the container's tasks spent runnable in a run queue (sum "
        "of all waits). 1.0 means one task's worth of time lost every second. Rising "
        "with flat CPU usage: the container is being starved.",
        "s",
        [victim_query(rate(pq.RUNQ_SUM, RATE, context.selectors.container))],
    )


ROW = Row("Run queue (scheduler probe)", (latency_heatmap, p99, wakeups, time_waiting))
