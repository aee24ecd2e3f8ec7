"""Overview row: every container's CPU and memory against its entitlement."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge

from ... import promql as pq
from ...promql import rate, sel
from ..layout import Context, Row
from ..links import field_link
from ..panels import ORANGE, RED, Query, bar_gauge_panel
from ..selectors import RATE, named

# Display bands, not alert thresholds.
USAGE_BANDS = [(0.8, ORANGE), (1.0, RED)]
LEGEND = "{{victim}} · {{basis}}"


def _entitlement_gauge(
    context: Context, title: str, description: str, ratio: str
) -> bargauge.Panel:
    """One bar per container: ``ratio`` (used over entitlement), a click drills down."""
    return bar_gauge_panel(
        context.ids,
        title,
        description,
        "percentunit",
        [Query(ratio, LEGEND, instant=True)],
        USAGE_BANDS,
        height=14,
        max_val=1,
    ).data_links(field_link(context.selectors))


def _per_entitlement(used: str, entitlement: str) -> str:
    """``used`` over the container's entitlement, its basis (limit, request, node) kept."""
    return named(f"{used} / ignoring(basis) group_left(basis) {entitlement}")


def cpu_used(context: Context) -> bargauge.Panel:
    containers = context.selectors.overview
    return _entitlement_gauge(
        context,
        "CPU used / entitlement",
        "CPU each container used, as a share of its entitlement: its CPU limit, else its "
        "request, else the node's cores; the basis is shown after the name. Colours are "
        "display bands (80%, 100%), not alert thresholds. Red against a limit: the "
        "container is at its quota and likely throttled (see the throttling gauge below "
        "and the drill-down). Red against a request: it uses more than it asked for and "
        "can be named as a noisy neighbour; give it a request that reflects its use. "
        "Red against the node: the node's CPUs are busy. Click a bar to drill down.",
        _per_entitlement(rate(pq.USAGE, RATE, containers), sel(pq.CPU_ENTITLEMENT, containers)),
    )


def memory_used(context: Context) -> bargauge.Panel:
    containers = context.selectors.overview
    return _entitlement_gauge(
        context,
        "Memory working set / entitlement",
        "Working set (memory in use minus inactive file cache) of each container, as a "
        "share of its entitlement: its memory limit, else its request, else the node's "
        "memory; the basis is shown after the name. Colours are display bands (80%, "
        "100%). Red against a limit: the container is close to reclaim and OOM at its "
        "own limit (memory-limit-thrash); raise the limit or cut its use. Red against a "
        "request: it grows beyond what it asked for and is a candidate culprit when the "
        "node runs short of memory; set a realistic request. Click a bar to drill down.",
        _per_entitlement(sel(pq.WORKING_SET, containers), sel(pq.MEM_ENTITLEMENT, containers)),
    )


ROW = Row("Every container against its entitlement", (cpu_used, memory_used))
