"""Drill-down row: the container's CPU: use against request and limit, throttling and
CPU pressure."""

from __future__ import annotations

from grafana_foundation_sdk.builders import timeseries

from ... import promql as pq
from ...promql import rate, sel
from ..layout import Context, Row
from ..panels import ORANGE, RED, dashed, timeseries_panel, victim_query
from ..selectors import RATE

CORES = "suffix: cores"


def used_vs_request_and_limit(context: Context) -> timeseries.Panel:
    container = context.selectors.container
    return (
        timeseries_panel(
            context.ids,
            "CPU used vs request vs limit",
            "CPU the container used (cores), with its request (dashed, from the pod spec or "
            "the metadata file) and its CPU limit (dashed, cpu.max or the v1 quota: the "
            "entitlement when its basis is the limit). Used "
            "at the limit: it is throttled, see the next panel. Used well above the "
            "request: it is running on CPU nobody reserved for it and can be named as a "
            "noisy neighbour of others; give it a request that reflects its use.",
            CORES,
            [
                victim_query(rate(pq.USAGE, RATE, container), "used", ref="used"),
                victim_query(sel(pq.CPU_REQUEST, container), "request", ref="request"),
                victim_query(
                    sel(pq.CPU_ENTITLEMENT, container, pq.LIMIT_BASIS), "limit", ref="limit"
                ),
            ],
        )
        .override_by_regexp(*dashed(".* request$"))
        .override_by_regexp(*dashed(".* limit$"))
    )


def throttled_periods(context: Context) -> timeseries.Panel:
    th = context.th
    window = th.window_minutes
    ratio = pq.throttle_ratio(context.selectors.window, context.selectors.container)
    return timeseries_panel(
        context.ids,
        f"Throttled periods ({window}m window)",
        "Share of CFS enforcement periods in which the container hit its own CPU quota, "
        f"over the findings window ({window} minutes), exactly as the alerts compute it. "
        f"Orange line: throttledRatioMax ({th.throttled_ratio_max:.0%}); above it the "
        "container is never blamed on a neighbour, its own limit explains the wait. Red "
        f"line: throttledRatio ({th.throttled_ratio:.0%}); above it cpu-throttled fires. "
        "Fix: raise or remove resources.limits.cpu.",
        "percentunit",
        [victim_query(ratio)],
        lines=[(th.throttled_ratio_max, ORANGE), (th.throttled_ratio, RED)],
        max_val=1,
    )


def throttled_time(context: Context) -> timeseries.Panel:
    return timeseries_panel(
        context.ids,
        "Throttled time",
        "Seconds per second the container's tasks spent throttled (cpu.stat "
        "throttled_usec, v1 throttled_time). Unlike the ratio this grows with the "
        "number of threads held back. Non-zero while the ratio is red: the limit is "
        "too small for its bursts.",
        "s",
        [victim_query(rate(pq.THROTTLED_SECONDS, RATE, context.selectors.container))],
        width=8,
    )


def pressure_some(context: Context) -> timeseries.Panel:
    th = context.th
    return timeseries_panel(
        context.ids,
        "CPU pressure some (per minute)",
        "Share of each minute in which at least one of the container's tasks was "
        "runnable but not running (cgroup cpu.pressure 'some'), as the findings compute "
        f"it. Red line: stallSome ({th.stall_some:.0%}); a minute above it counts as "
        f"stalled, and {th.sustain_minutes} stalled minutes in a row make a "
        "noisy-neighbor or cpu-contended finding (unless the container throttles "
        "itself). Throttling also shows here: check the throttle panel first.",
        "percentunit",
        [victim_query(rate(pq.CPU_SOME, "1m", context.selectors.container))],
        width=8,
        lines=[(th.stall_some, RED)],
    )


def pressure_full(context: Context) -> timeseries.Panel:
    th = context.th
    return timeseries_panel(
        context.ids,
        "CPU pressure full (per minute)",
        "Share of each minute in which all of the container's non-idle tasks were "
        "waiting for a CPU (cgroup cpu.pressure 'full'). Red line: criticalCpuFull "
        f"({th.critical_cpu_full:.0%}); above it a CPU finding on this container is "
        "critical. The container makes no progress at all during these stalls.",
        "percentunit",
        [victim_query(rate(pq.CPU_FULL, "1m", context.selectors.container))],
        width=8,
        lines=[(th.critical_cpu_full, RED)],
    )


ROW = Row(
    "CPU",
    (used_vs_request_and_limit, throttled_periods, throttled_time, pressure_some, pressure_full),
)
