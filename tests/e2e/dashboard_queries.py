"""Every PromQL query of the generated Grafana dashboards, ready to send to Prometheus.

Used by the end-to-end test, which runs each query against a real Prometheus holding
real exporter data. Grafana's variables are replaced the way Grafana would with every
template variable on "All" (``.*``, which also matches an absent label, so the queries
work for host-mode and Kubernetes-mode data alike)::

    from tests.e2e.dashboard_queries import all_panel_queries

    for uid, title, expr in all_panel_queries():
        result = prometheus_query(expr)  # must not be an error

Built-in interval variables become fixed durations (``$__rate_interval`` -> ``1m``);
override any of them, or pin a node/cgroup, with ``variables={"node": "127.0.0.1:10366"}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from exporter.dashboards.render import dashboard_models
from exporter.findings.thresholds import Thresholds, load_thresholds

DEFAULT_VARIABLES: dict[str, str] = {
    "cluster": ".*",
    "node": ".*",
    "namespace": ".*",
    "pod": ".*",
    "container": ".*",
    "cgroup": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}

_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Replace ``$name``, ``${name}``, ``${name:fmt}`` and ``[[name]]`` as Grafana does.

    ``$1``-style names are left alone (``label_replace`` capture groups: Grafana only
    replaces names of variables that exist, and none is numeric). Any other unknown
    variable is an error: a query the e2e test could not run as Grafana would.
    """

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name.isdigit():
            return m.group(0)
        if name not in variables:
            raise KeyError(f"no value for dashboard variable ${name} in {expr!r}")
        return variables[name]

    return _VAR.sub(repl, expr)


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels") or [])  # collapsed rows hold their panels


def all_panel_queries(
    variables: Mapping[str, str] | None = None,
    thresholds: Thresholds | None = None,
) -> list[tuple[str, str, str]]:
    """``(dashboard_uid, panel_title, expr)`` for every query target of every panel,
    with the dashboard variables substituted, in dashboard and panel order."""
    values = {**DEFAULT_VARIABLES, **(variables or {})}
    th = thresholds if thresholds is not None else load_thresholds()
    out: list[tuple[str, str, str]] = []
    for uid, model in dashboard_models(th).items():
        for panel in _panels(model.get("panels") or []):
            for t in panel.get("targets") or []:
                expr = t.get("expr")
                if expr:
                    out.append((uid, str(panel.get("title", "")), substitute(expr, values)))
    return out


_LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$", re.S)


def all_variable_queries(
    variables: Mapping[str, str] | None = None,
    thresholds: Thresholds | None = None,
) -> list[tuple[str, str, str, str]]:
    """``(dashboard_uid, variable, series_selector, label)`` for every
    ``label_values(selector, label)`` template variable, selector substituted: the
    e2e test can ask ``/api/v1/label/<label>/values?match[]=<selector>``."""
    values = {**DEFAULT_VARIABLES, **(variables or {})}
    th = thresholds if thresholds is not None else load_thresholds()
    out: list[tuple[str, str, str, str]] = []
    for uid, model in dashboard_models(th).items():
        for var in model.get("templating", {}).get("list", []):
            query = var.get("query")
            if var.get("type") != "query" or not isinstance(query, str):
                continue
            m = _LABEL_VALUES.match(query.strip())
            if m is None:
                raise ValueError(f"{uid}: variable {var.get('name')}: unexpected query {query!r}")
            selector = substitute(m.group(1) or "", values)
            out.append((uid, str(var["name"]), selector, m.group(2)))
    return out
