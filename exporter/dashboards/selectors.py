"""Selectors, joins and names both dashboards use (plain strings, no Grafana SDK).

The PromQL facts the dashboards share with the rules are in ``exporter.promql``.

Two node modes must work with the same queries:

* **Kubernetes** (or a metadata file naming containers): per-container series carry
  ``namespace``, ``pod``, ``container`` (``cgroup`` only until the pod is named);
* **host mode**: only ``cgroup`` is set; the other three are absent.

Every template variable is a regex with ``.*`` as its "All" value, and ``=~".*"``
matches an absent label, so one selector serves both modes. Human names come from
:func:`named`: ``namespace/pod/container`` when the pod is known, else the cgroup path
(the same rule as ``Identity.name`` in the exporter).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import promql as pq
from ..findings.thresholds import Thresholds
from ..probe.culprit import CULPRIT_LABELS

# Grafana's rate window: at least four scrape intervals, grows with the zoom level.
RATE = "$__rate_interval"

# The legend of a victim's series: the name :func:`named` gives it.
VICTIM_LEGEND = "{{victim}}"

# Template variable names (also the URL parameters ``var-<name>``).
V_DATASOURCE = "datasource"
V_CLUSTER = "cluster"
V_NODE = "node"
V_NAMESPACE = "namespace"
V_POD = "pod"
V_CONTAINER = "container"
V_CGROUP = "cgroup"

# The cluster variable's label when the config names none (``clusterLabel``).
CLUSTER_LABEL = "cluster"

# Labels that only the finding / blame series carry, ignored when they meet victim series.
FINDING_ONLY_LABELS = ("kind", "level", *CULPRIT_LABELS)


@dataclass(frozen=True, slots=True)
class Selectors:
    """Selectors and joins for one threshold config."""

    th: Thresholds

    @property
    def node_label(self) -> str:
        """The label the ``node`` variable filters on: the last of ``nodeLabels``."""
        return self.th.node_labels[-1]

    @property
    def node_legend(self) -> str:
        """A legend naming a series by its node label (``{{instance}}``)."""
        return f"{{{{{self.node_label}}}}}"

    @property
    def cluster_label(self) -> str:
        return self.th.cluster_label or CLUSTER_LABEL

    def on(self, *extra: str) -> str:
        """``on(<cluster>, <node labels>, extra...)``: how series of one exporter are
        joined (the rules' join labels)."""
        return pq.on(self.th.join_labels, *extra)

    def by(self, *extra: str) -> str:
        return pq.by(self.th.join_labels, *extra)

    @property
    def exporter(self) -> str:
        """The config's ``selector``: the exporter's series, as the rules select them."""
        return ", ".join(self.th.matchers)

    @property
    def node(self) -> str:
        """Matchers for node-level series: the exporter's, cluster (optional), node."""
        return (
            f'{self.exporter}, {self.cluster_label}=~"${V_CLUSTER}", '
            f'{self.node_label}=~"${V_NODE}"'
        )

    @property
    def overview(self) -> str:
        """Matchers for per-container series on the overview (node + namespace)."""
        return f'{self.node}, namespace=~"${V_NAMESPACE}"'

    @property
    def container(self) -> str:
        """Matchers for per-container series on the drill-down (every variable)."""
        return (
            f'{self.node}, namespace=~"${V_NAMESPACE}", pod=~"${V_POD}", '
            f'container=~"${V_CONTAINER}", cgroup=~"${V_CGROUP}"'
        )

    @property
    def window(self) -> str:
        """The findings window as a range (``5m``), as the alerts use it."""
        return f"{self.th.window_minutes}m"


def named(expr: str, label: str = "victim") -> str:
    """Add ``label`` = ``namespace/pod/container`` if the pod is known, else the cgroup.

    ``label_replace`` leaves a series unchanged when its regex does not match, and an
    empty replacement removes a label, so the helper label ``<label>_parts`` is gone
    from the result.
    """
    parts = f"{label}_parts"
    joined = f'label_join({expr}, "{parts}", "|", "namespace", "pod", "container", "cgroup")'
    base = f'label_replace({joined}, "{label}", "$1", "cgroup", "(.*)")'
    pod_re = "([^|]+)[|]([^|]+)[|]([^|]*)[|].*"
    pod = f'label_replace({base}, "{label}", "$1/$2/$3", "{parts}", "{pod_re}")'
    return f'label_replace({pod}, "{parts}", "", "{parts}", ".*")'


def named_culprit(expr: str, label: str = "target") -> str:
    """Add ``label`` naming the culprit the way :func:`named` names a victim.

    A pod culprit is ``namespace/pod/container``, another container or a systemd unit
    its cgroup path (so a cgroup that is both victim and culprit is one node of the
    graph); kernel, idle and unknown keep their ``culprit`` name.
    """
    parts = f"{label}_parts"
    joined = (
        f'label_join({expr}, "{parts}", "|", "culprit_kind", "culprit_cgroup", '
        '"culprit_namespace", "culprit_pod", "culprit_container")'
    )
    base = f'label_replace({joined}, "{label}", "$1", "culprit", "(.*)")'
    path = f'label_replace({base}, "{label}", "$1", "{parts}", "(?:pod|system)[|]([^|]+)[|].*")'
    pod = (
        f'label_replace({path}, "{label}", "$1/$2/$3", "{parts}", '
        '"[^|]*[|][^|]*[|]([^|]+)[|]([^|]+)[|]([^|]*)")'
    )
    return f'label_replace({pod}, "{parts}", "", "{parts}", ".*")'
