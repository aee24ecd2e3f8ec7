"""Pieces both dashboards use: the active-findings table and drill-down links."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from .panels import BLUE, ORANGE, RED, Ids, T, grid, prop, thresholds, transform, value_map
from .promql import V_CGROUP, V_CLUSTER, V_DATASOURCE, V_NODE, Q, named, sel

OVERVIEW_UID = "contention-node-overview"
DRILLDOWN_UID = "contention-container-drilldown"
TAG = "contention-exporter"

RUNQ_BUCKET = "contention_runqueue_latency_seconds_bucket"


def drilldown_url(node: str, cgroup: str) -> str:
    """A link to the drill-down for one container, keeping datasource, cluster and time."""
    return (
        f"/d/{DRILLDOWN_UID}?var-{V_NODE}={node}&var-{V_CGROUP}={cgroup}"
        f"&${{{V_DATASOURCE}:queryparam}}&${{{V_CLUSTER}:queryparam}}&${{__url_time_range}}"
    )


def field_link(q: Q) -> list[cogbuilder.Builder[dm.DashboardLink]]:
    """Data link for series panels (labels of the clicked series)."""
    url = drilldown_url(f"${{__field.labels.{q.node_label}}}", "${__field.labels.cgroup}")
    return [db.DashboardLink("Drill down into this container").url(url)]


def row_link(q: Q) -> list[dict[str, object]]:
    """Data link for table rows (columns of the clicked row)."""
    return [
        {
            "title": "Drill down into this container",
            "url": drilldown_url(f"${{__data.fields.{q.node_label}}}", "${__data.fields.cgroup}"),
        }
    ]


def p99(matchers: str, window: str = "1m") -> str:
    """Per-victim run-queue p99 from the histogram, as the alerts compute it."""
    return f"histogram_quantile(0.99, rate({sel(RUNQ_BUCKET, matchers)}[{window}]))"


def throttle_ratio(matchers: str, window: str) -> str:
    return (
        f"rate({sel('contention_cpu_cfs_throttled_periods_total', matchers)}[{window}])"
        f" / rate({sel('contention_cpu_cfs_periods_total', matchers)}[{window}])"
    )


# Column titles of the findings table (after the organize transformation).
COL_THROTTLED = "throttled (window)"
COL_CPU = "CPU some (1m)"
COL_P99 = "run-queue p99 (1m)"
COL_MEM = "memory some (1m)"
COL_SHARE = "culprit share (window)"


def findings_table(ids: Ids, q: Q, matchers: str, title: str, *, h: int = 8) -> table.Panel:
    """Every active ``contention_finding`` with the numbers that decide it.

    Each query is the finding series itself multiplied by one number of its victim
    (``finding * on(node, cgroup) group_left() number``), reduced to the same label set,
    so the ``merge`` transformation lines the numbers up as columns of one row per
    finding.
    """
    th = q.th
    keep = q.by("cgroup", "victim", "kind", "severity", "culprit_kind", "culprit")
    finding = sel("contention_finding", matchers)
    on_v = q.on("cgroup")

    def with_number(number: str) -> str:
        return f"max {keep} (\n  {named(f'{finding} * {on_v} group_left() ({number})')}\n)"

    nn = sel("contention_finding", matchers, 'kind="noisy-neighbor"')
    blame = sel("contention_blame_share", matchers)
    by_pair = q.by("cgroup", "culprit_cgroup")
    on_pair = q.on("cgroup", "culprit_cgroup")
    share = f"max {keep} (\n  {named(f'{nn} * {on_pair} group_left() max {by_pair} ({blame})')}\n)"
    queries = [
        T(f"max {keep} ({named(finding)})", ref="finding"),
        T(with_number(throttle_ratio(matchers, q.window)), ref="throttled"),
        T(
            with_number(
                f"rate({sel('contention_cpu_pressure_waiting_seconds_total', matchers)}[1m])"
            ),
            ref="cpu",
        ),
        T(with_number(p99(matchers)), ref="p99"),
        T(
            with_number(
                f"rate({sel('contention_memory_pressure_waiting_seconds_total', matchers)}[1m])"
            ),
            ref="mem",
        ),
        T(share, ref="share"),
    ]
    queries = [T(t.expr, ref=t.ref, instant=True, fmt=pm.PromQueryFormat.TABLE) for t in queries]
    desc = (
        "Findings the exporter reports right now (contention_finding), one row each, with "
        "the numbers that decide them: throttled share of CFS periods over the "
        f"{th.window_minutes}-minute window, CPU pressure 'some' and run-queue p99 in the "
        "latest minute, memory pressure 'some', and for a noisy-neighbor the culprit's "
        "share of the victim's run-queue wait. Red cells are at or past the threshold that "
        "makes the finding fire. What to do: cpu-throttled -> raise or remove the victim's "
        "CPU limit; noisy-neighbor -> lower the culprit's usage or give it a request that "
        "reflects it, or move one of the two; cpu-contended -> the node is oversubscribed, "
        "add capacity or spread the workload; memory-pressure -> set or raise memory "
        "requests on the (heuristic) culprit or add memory; memory-limit-thrash -> raise "
        "the victim's memory limit. Click a victim to open the drill-down."
    )
    organize = {
        "excludeByName": {"Time": True, "Value #finding": True},
        "renameByName": {
            "Value #throttled": COL_THROTTLED,
            "Value #cpu": COL_CPU,
            "Value #p99": COL_P99,
            "Value #mem": COL_MEM,
            "Value #share": COL_SHARE,
        },
        "indexByName": {
            name: i
            for i, name in enumerate(
                [
                    "severity",
                    "kind",
                    "victim",
                    "culprit_kind",
                    "culprit",
                    "Value #throttled",
                    "Value #cpu",
                    "Value #p99",
                    "Value #mem",
                    "Value #share",
                    *th.node_labels,
                    "cgroup",
                ]
            )
        },
    }
    color_text = {"type": "color-text"}
    p = (
        grid(ids, title, desc, "short", queries, h=h)
        .with_transformation(transform("merge", {}))
        .with_transformation(transform("organize", organize))
        .override_by_name(
            "severity",
            [
                prop(
                    "mappings",
                    [
                        value_map(
                            {
                                "critical": ("critical", RED),
                                "warning": ("warning", ORANGE),
                                "info": ("info", BLUE),
                            }
                        )
                    ],
                ),
                prop("custom.cellOptions", {"type": "color-background"}),
            ],
        )
        .override_by_name("victim", [prop("links", row_link(q))])
    )
    numbers: list[tuple[str, str, list[tuple[float, str]]]] = [
        (
            COL_THROTTLED,
            "percentunit",
            [(th.throttled_ratio_max, ORANGE), (th.throttled_ratio, RED)],
        ),
        (COL_CPU, "percentunit", [(th.stall_some, RED)]),
        (COL_P99, "s", [(th.runq_bound_s, ORANGE), (th.critical_runq_bound_s, RED)]),
        (COL_MEM, "percentunit", [(th.mem_stall_some, RED)]),
        (COL_SHARE, "percentunit", [(th.blame_share, RED)]),
    ]
    for name, unit, steps in numbers:
        p = p.override_by_name(
            name,
            [
                prop("unit", unit),
                prop("thresholds", thresholds(*steps).build()),
                prop("custom.cellOptions", color_text),
            ],
        )
    return p
