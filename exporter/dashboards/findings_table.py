"""The active-findings table both dashboards open with: every ``contention_finding``
with the numbers that decide it, red where a number is past its threshold."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.models import prometheus as pm

from .. import promql as pq
from ..findings.thresholds import Thresholds
from ..identity import IDENTITY_LABELS
from ..promql import CULPRIT_IDENTITY, WORKLOAD_CULPRIT_LABELS, rate, sel
from .links import row_link
from .panels import (
    BLUE,
    ORANGE,
    RED,
    Ids,
    Query,
    prop,
    table_panel,
    thresholds,
    transform,
    value_map,
)
from .selectors import Selectors, named

# Column titles of the findings table (after the organize transformation).
COL_THROTTLED = "throttled (window)"
COL_CPU = "CPU some (1m)"
COL_P99 = "run-queue p99 (1m)"
COL_MEM = "memory some (1m)"
COL_SHARE = "culprit share (window)"

# The columns of a finding row, in order, before the node and identity labels.
_COLUMNS = (
    "level",
    "kind",
    "victim",
    "culprit_kind",
    "culprit",
    "Value #throttled",
    "Value #cpu",
    "Value #p99",
    "Value #mem",
    "Value #share",
)

_DESCRIPTION = (
    f"Findings the exporter reports right now ({pq.FINDING}), one row each, with "
    "the numbers that decide them: throttled share of CFS periods over the "
    "{window}-minute window, CPU pressure 'some' and run-queue p99 in the "
    "latest minute, memory pressure 'some', and for a noisy-neighbor the culprit's "
    "share of the victim's run-queue wait. Red cells are at or past the threshold that "
    "makes the finding fire. What to do: cpu-throttled -> raise or remove the victim's "
    "CPU limit; noisy-neighbor -> lower the culprit's usage or give it a request that "
    "reflects it, or move one of the two; cpu-contended -> the node is oversubscribed, "
    "add capacity or spread the workload; memory-pressure -> set or raise memory "
    "requests on the (heuristic) culprit or add memory; memory-limit-thrash -> raise "
    "the victim's memory limit. Click a victim to open the drill-down."
)


def findings_table(
    ids: Ids, selectors: Selectors, matchers: str, title: str, *, height: int = 8
) -> table.Panel:
    """Every active ``contention_finding`` with the numbers that decide it.

    Each query is the finding series itself multiplied by one number of its victim
    (``finding * on(node, <identity labels>) group_left() number``), reduced to the same label set,
    so the ``merge`` transformation lines the numbers up as columns of one row per
    finding.
    """
    th = selectors.th
    queries = _queries(selectors, matchers)
    description = _DESCRIPTION.format(window=th.window_minutes)
    panel = (
        table_panel(ids, title, description, "short", queries, height=height)
        .with_transformation(transform("merge", {}))
        .with_transformation(transform("organize", _organize(th)))
        .override_by_name(
            "level",
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
        .override_by_name("victim", [prop("links", row_link(selectors))])
    )
    for name, unit, steps in _number_columns(th):
        panel = panel.override_by_name(
            name,
            [
                prop("unit", unit),
                prop("thresholds", thresholds(*steps).build()),
                prop("custom.cellOptions", {"type": "color-text"}),
            ],
        )
    return panel


def _queries(selectors: Selectors, matchers: str) -> list[Query]:
    """The finding series, then one query per number column (refs name the columns)."""
    keep = selectors.by(*IDENTITY_LABELS, "victim", "kind", "level", "culprit_kind", "culprit")
    finding = sel(pq.FINDING, matchers)
    victim_on = selectors.on(*IDENTITY_LABELS)

    def with_number(number: str) -> str:
        return f"max {keep} (\n  {named(f'{finding} * {victim_on} group_left() ({number})')}\n)"

    queries = [
        Query(f"max {keep} ({named(finding)})", ref="finding"),
        Query(with_number(pq.throttle_ratio(selectors.window, matchers)), ref="throttled"),
        Query(with_number(rate(pq.CPU_SOME, "1m", matchers)), ref="cpu"),
        Query(with_number(pq.runq_p99("1m", matchers)), ref="p99"),
        Query(with_number(rate(pq.MEM_SOME, "1m", matchers)), ref="mem"),
        Query(f"max {keep} (\n  {_culprit_share(selectors, matchers)}\n)", ref="share"),
    ]
    return [
        Query(query.expr, ref=query.ref, instant=True, fmt=pm.PromQueryFormat.TABLE)
        for query in queries
    ]


def _culprit_share(selectors: Selectors, matchers: str) -> str:
    """A noisy-neighbor's culprit share: the container's, or a workload culprit's (its
    containers together, contention_workload_blame_ratio)."""
    noisy = sel(pq.FINDING, matchers, 'kind="noisy-neighbor"')
    pair = (*IDENTITY_LABELS, *CULPRIT_IDENTITY)
    blame = sel(pq.BLAME_RATIO, matchers)
    container = named(
        f"{noisy} * {selectors.on(*pair)} group_left() max {selectors.by(*pair)} ({blame})"
    )
    workload = (*IDENTITY_LABELS, *WORKLOAD_CULPRIT_LABELS)
    workload_blame = sel(pq.WORKLOAD_BLAME_RATIO, matchers)
    by_workload = f"max {selectors.by(*workload)} ({workload_blame})"
    workload_share = named(f"{noisy} * {selectors.on(*workload)} group_left() {by_workload}")
    return f"{container}\n  or\n  {workload_share}"


def _organize(th: Thresholds) -> dict[str, Any]:
    """The organize transformation: hide the time and the finding's own value, name the
    number columns, order every column."""
    return {
        "excludeByName": {"Time": True, "Value #finding": True},
        "renameByName": {
            "Value #throttled": COL_THROTTLED,
            "Value #cpu": COL_CPU,
            "Value #p99": COL_P99,
            "Value #mem": COL_MEM,
            "Value #share": COL_SHARE,
        },
        "indexByName": {
            name: i for i, name in enumerate([*_COLUMNS, *th.join_labels, *IDENTITY_LABELS])
        },
    }


def _number_columns(th: Thresholds) -> list[tuple[str, str, list[tuple[float, str]]]]:
    """Each number column: its title, unit and threshold colours."""
    return [
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
