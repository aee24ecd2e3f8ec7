"""Template variables shared by both dashboards.

``cluster`` is optional: it lists the ``cluster`` label when the Prometheus setup adds
one (external or target label) and otherwise only offers "All". Every variable but the
datasource is a regex whose "All" value is ``.*``, which also matches an absent label:
that is what makes one set of queries serve host mode (no namespace/pod/container) and
Kubernetes mode.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import dashboard as dm

from .. import promql as pq
from .panels import DS
from .selectors import (
    V_CGROUP,
    V_CLUSTER,
    V_CONTAINER,
    V_DATASOURCE,
    V_NAMESPACE,
    V_NODE,
    V_POD,
    Selectors,
)

ALL = dm.VariableOption(selected=True, text="All", value="$__all")


def datasource() -> db.DatasourceVariable:
    return (
        db.DatasourceVariable(V_DATASOURCE)
        .label("Data source")
        .description("The Prometheus that scrapes contention-exporter.")
        .type("prometheus")
    )


def _query(name: str, label: str, desc: str, query: str) -> db.QueryVariable:
    return (
        db.QueryVariable(name)
        .label(label)
        .description(desc)
        .datasource(DS)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
    )


def _all(variable: db.QueryVariable, multi: bool = True) -> db.QueryVariable:
    return variable.include_all(True).all_value(".*").multi(multi).current(ALL)


def cluster(selectors: Selectors) -> db.QueryVariable:
    label = selectors.cluster_label
    return _all(
        _query(
            V_CLUSTER,
            "Cluster",
            f"Optional: only offered when Prometheus adds a '{label}' label "
            "(the threshold config's clusterLabel). 'All' also matches series without one.",
            f"label_values({pq.BUILD_INFO}{{{selectors.exporter}}}, {label})",
        ),
        multi=False,
    )


def node(selectors: Selectors, *, allow_all: bool) -> db.QueryVariable:
    label = selectors.node_label
    variable = _query(
        V_NODE,
        "Node",
        f"The exporter's node, by its '{label}' label (the last of the threshold "
        "config's nodeLabels).",
        f"label_values({pq.BUILD_INFO}{{{selectors.exporter}, "
        f'{selectors.cluster_label}=~"${V_CLUSTER}"}}, {label})',
    )
    return _all(variable, multi=False) if allow_all else variable.multi(False)


def namespace(selectors: Selectors) -> db.QueryVariable:
    return _all(
        _query(
            V_NAMESPACE,
            "Namespace",
            "Kubernetes namespace. Empty in host mode: leave it on 'All' and pick a cgroup.",
            f"label_values({pq.CGROUP_INFO}{{{selectors.node}}}, namespace)",
        )
    )


def pod(selectors: Selectors) -> db.QueryVariable:
    return _all(
        _query(
            V_POD,
            "Pod",
            "Kubernetes pod. Empty in host mode: leave it on 'All' and pick a cgroup.",
            f'label_values({pq.CGROUP_INFO}{{{selectors.node}, namespace=~"${V_NAMESPACE}"}}, pod)',
        )
    )


def container(selectors: Selectors) -> db.QueryVariable:
    return _all(
        _query(
            V_CONTAINER,
            "Container",
            "Kubernetes container. Empty in host mode: leave it on 'All' and pick a cgroup.",
            f'label_values({pq.CGROUP_INFO}{{{selectors.node}, namespace=~"${V_NAMESPACE}", '
            f'pod=~"${V_POD}"}}, container)',
        )
    )


def cgroup(selectors: Selectors) -> db.QueryVariable:
    return _all(
        _query(
            V_CGROUP,
            "Cgroup",
            "The tracked cgroup (path under the cgroup2 root), for cgroups known by their "
            "path: the way to pick a systemd unit or docker container in host mode. A "
            "container named by Kubernetes (or the metadata file) is picked by "
            "namespace/pod/container instead; leave this on 'All'.",
            f'label_values({pq.CGROUP_INFO}{{{selectors.node}, namespace=~"${V_NAMESPACE}", '
            f'pod=~"${V_POD}", container=~"${V_CONTAINER}"}}, cgroup)',
        )
    )
