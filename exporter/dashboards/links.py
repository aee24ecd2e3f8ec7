"""Data links from a container on the overview (a bar, a table row) to its drill-down."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dm

from .base import DRILLDOWN_UID
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

TITLE = "Drill down into this container"

# The drill-down's variables a link sets from the clicked container's labels: its
# names, or its cgroup path (an absent label gives an empty value, which matches an
# absent label again).
_LINKED = (V_NAMESPACE, V_POD, V_CONTAINER, V_CGROUP)


def drilldown_url(selectors: Selectors, source: str) -> str:
    """A link to the drill-down for one container, keeping datasource, cluster and time.
    ``source``: where Grafana finds the clicked container's labels (``__field.labels``
    for a series, ``__data.fields`` for a table row)."""
    params = [f"var-{V_NODE}=${{{source}.{selectors.node_label}}}"]
    params += [f"var-{name}=${{{source}.{name}}}" for name in _LINKED]
    return (
        f"/d/{DRILLDOWN_UID}?{'&'.join(params)}"
        f"&${{{V_DATASOURCE}:queryparam}}&${{{V_CLUSTER}:queryparam}}&${{__url_time_range}}"
    )


def field_link(selectors: Selectors) -> list[cogbuilder.Builder[dm.DashboardLink]]:
    """Data link for series panels (labels of the clicked series)."""
    url = drilldown_url(selectors, "__field.labels")
    return [db.DashboardLink(TITLE).url(url)]


def row_link(selectors: Selectors) -> list[dict[str, object]]:
    """Data link for table rows (columns of the clicked row)."""
    return [{"title": TITLE, "url": drilldown_url(selectors, "__data.fields")}]
