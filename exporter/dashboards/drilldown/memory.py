"""Drill-down row: the container's memory: working set against request and limit,
memory pressure, refaults, limit hits, and the node's memory pressure that decides
between memory-pressure and memory-limit-thrash."""

from __future__ import annotations

from grafana_foundation_sdk.builders import timeseries

from ... import promql as pq
from ...promql import rate, sel
from ..layout import Context, Row
from ..panels import ORANGE, RED, Query, dashed, timeseries_panel, victim_query
from ..selectors import RATE

LIMIT_EVENTS = 'event=~"high|max|oom|oom_kill"'


def working_set_vs_request_and_limit(context: Context) -> timeseries.Panel:
    container = context.selectors.container
    return timeseries_panel(
        context.ids,
        "Memory working set vs request vs limit",
        "Working set (in use minus inactive file cache), with the memory request "
        "(dashed) and the limit (dashed: the entitlement when its basis is the limit). "
        "Working set near "
        "the limit: the kernel reclaims the container's own pages and may OOM-kill it "
        "(see limit hits below); raise resources.limits.memory. Working set well above "
        "the request: a candidate culprit when the node runs short of memory.",
        "bytes",
        [
            victim_query(sel(pq.WORKING_SET, container), "working set", ref="ws"),
            victim_query(sel(pq.MEM_REQUEST, container), "request", ref="request"),
            victim_query(sel(pq.MEM_ENTITLEMENT, container, pq.LIMIT_BASIS), "limit", ref="limit"),
        ],
    ).override_by_regexp(*dashed(".* (request|limit)$"))


def pressure_some(context: Context) -> timeseries.Panel:
    th = context.th
    return timeseries_panel(
        context.ids,
        "Memory pressure some (per minute)",
        "Share of each minute in which some of the container's tasks stalled on memory "
        "(reclaim, refaults, swap-in; cgroup memory.pressure 'some'). Red line: "
        f"memStallSome ({th.mem_stall_some:.0%}); a minute above it (or with refaults "
        "above their line) counts as memory-stalled. Whether it becomes memory-pressure "
        "or memory-limit-thrash depends on the node (panel below).",
        "percentunit",
        [victim_query(rate(pq.MEM_SOME, "1m", context.selectors.container))],
        width=6,
        lines=[(th.mem_stall_some, RED)],
    )


def pressure_full(context: Context) -> timeseries.Panel:
    th = context.th
    return timeseries_panel(
        context.ids,
        "Memory pressure full (per minute)",
        "Share of each minute in which all of the container's non-idle tasks stalled on "
        f"memory. Red line: criticalMemFull ({th.critical_mem_full:.0%}); above it a "
        "memory finding on this container is critical.",
        "percentunit",
        [victim_query(rate(pq.MEM_FULL, "1m", context.selectors.container))],
        width=6,
        lines=[(th.critical_mem_full, RED)],
    )


def refaults(context: Context) -> timeseries.Panel:
    th = context.th
    per_minute = f"{pq.refaults('1m', context.selectors.container)} * 60"
    return timeseries_panel(
        context.ids,
        "Workingset refaults per minute",
        "Pages the container had to read back soon after the kernel evicted them "
        "(anon + file), per minute: the container's working set does not fit. Red line: "
        f"refaultPerMin ({th.refault_per_min:g}); a minute above it counts as "
        "memory-stalled.",
        "short",
        [victim_query(per_minute)],
        width=8,
        lines=[(th.refault_per_min, RED)],
    )


def limit_hits(context: Context) -> timeseries.Panel:
    events = rate(pq.MEM_EVENTS, RATE, context.selectors.container, LIMIT_EVENTS)
    return timeseries_panel(
        context.ids,
        "Memory limit hits per minute",
        "memory.events per minute: 'high' (throttled at memory.high), 'max' (hit the "
        "limit and reclaimed), and 'oom' and 'oom_kill' when the exporter runs with "
        "--collector.memory_oom. high/max rising together with memory stall while the "
        "node is not short of memory is memory-limit-thrash: raise "
        "resources.limits.memory. Any oom_kill: the container lost a process.",
        "short",
        [victim_query(f"{events} * 60", "{{event}}")],
        width=8,
    )


def node_pressure(context: Context) -> timeseries.Panel:
    th = context.th
    selectors = context.selectors
    return timeseries_panel(
        context.ids,
        "Node memory pressure (some, per minute)",
        "Memory pressure of the whole node. Dashed line: nodeMemStallSome "
        f"({th.node_mem_stall_some:.0%}). A memory-stalled container becomes "
        "memory-pressure above it (the node is short: set memory requests, add memory) "
        "and memory-limit-thrash below it (its own limit is too small).",
        "percentunit",
        [Query(rate(pq.NODE_MEM_SOME, "1m", selectors.node), selectors.node_legend)],
        width=8,
        lines=[(th.node_mem_stall_some, ORANGE)],
    )


ROW = Row(
    "Memory",
    (
        working_set_vs_request_and_limit,
        pressure_some,
        pressure_full,
        refaults,
        limit_hits,
        node_pressure,
    ),
)
