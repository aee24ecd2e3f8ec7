"""Drill-down row: who ran while the container waited: its top culprits' shares of
its run-queue wait over time, and as a graph of victims and culprits."""

from __future__ import annotations

from grafana_foundation_sdk.builders import nodegraph, timeseries
from grafana_foundation_sdk.models import nodegraph as ngm
from grafana_foundation_sdk.models import prometheus as pm

from ... import promql as pq
from ...promql import sel
from ..layout import Context, Row
from ..panels import DS, RED, Query, target, timeseries_panel, transform, victim_query
from ..selectors import named, named_culprit

CULPRIT = "← {{culprit}} ({{culprit_kind}})"


def culprit_shares(context: Context) -> timeseries.Panel:
    th = context.th
    container = context.selectors.container
    return timeseries_panel(
        context.ids,
        f"Top culprits' share of the wait ({th.window_minutes}m window)",
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
            victim_query(sel(pq.BLAME_RATIO, container), CULPRIT),
            victim_query(sel(pq.WORKLOAD_BLAME_RATIO, container), CULPRIT, ref="B"),
        ],
        lines=[(th.blame_share, RED)],
        max_val=1,
        height=10,
    )


def _edges(container: str) -> str:
    """The node graph's edges: one row per victim and culprit, its share in percent."""
    edges = named_culprit(named(sel(pq.BLAME_RATIO, container)))
    edges = f'label_replace({edges}, "source", "$1", "victim", "(.*)")'
    edges = f'label_join({edges}, "id", " -> ", "source", "target")'
    edges = f'label_replace({edges}, "detail__culprit_kind", "$1", "culprit_kind", "(.*)")'
    return f"max by(id, source, target, detail__culprit_kind) ({edges}) * 100"


def victim_culprit_graph(context: Context) -> nodegraph.Panel:
    th = context.th
    edges = Query(
        _edges(context.selectors.container),
        ref="edges",
        instant=True,
        fmt=pm.PromQueryFormat.TABLE,
    )
    return (
        nodegraph.Panel()
        .id(context.ids())
        .title(f"Victim → culprit ({th.window_minutes}m window)")
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
        .with_target(target(edges))
        .with_transformation(
            transform("renameByRegex", {"regex": "Value.*", "renamePattern": "mainstat"})
        )
        .edges(nodegraph.EdgeOptions().main_stat_unit("%"))
        .nodes(nodegraph.NodeOptions().main_stat_unit("%"))
        .zoom_mode(ngm.ZoomMode.COOPERATIVE)
    )


ROW = Row("Who ran while it waited", (culprit_shares, victim_culprit_graph))
