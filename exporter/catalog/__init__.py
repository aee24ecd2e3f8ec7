"""The metric catalog: every family the exporter exports, and every collector.

One entry per family (name, type, unit, help, labels, collector, scope, docs), one
per collector (name, on or off by default). Plain data, importing nothing of ours, so
the lowest layer can hold it and every generator can read it:

* ``exporter.exposition`` builds each family from its entry (``series.new``), in the
  order of its collector registry (``exposition.registry``);
* ``exporter.promql`` takes the names the rules and dashboards query from it;
* docs/metrics.md's tables are generated from it
  (``python -m tests.support.metrics_doc``; CI checks them fresh);
* the series budget per container is computed from it (``budget``).

To add a family: an entry in the module of its scope, then its samples in the
collector that builds it (CONTRIBUTING.md, "How to add a metric").
"""

from __future__ import annotations

from . import containers, findings, node, own, probe, selftest
from .collectors import COLLECTORS
from .model import Collector, Family, Label, Scope, Type

# In the docs' order: a scope's table lists its families in this order.
FAMILIES: tuple[Family, ...] = (
    *containers.FAMILIES,
    *node.FAMILIES,
    *probe.FAMILIES,
    *findings.FAMILIES,
    *own.FAMILIES,
    *selftest.FAMILIES,
)
BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}
COLLECTORS_BY_NAME: dict[str, Collector] = {c.name: c for c in COLLECTORS}
DEFAULT_COLLECTORS = frozenset(c.name for c in COLLECTORS if c.default)
# The collectors off by default, with their --collector.<name> help, in --help's order.
OPTIONAL_COLLECTORS: dict[str, str] = {c.name: c.flag_help for c in COLLECTORS if not c.default}


def family(name: str) -> Family:
    return BY_NAME[name]


def collector(name: str) -> Collector:
    return COLLECTORS_BY_NAME[name]


def enabled(optional: frozenset[str] | set[str]) -> frozenset[str]:
    """The collectors that run: the default ones and the ``optional`` ones asked for."""
    unknown = set(optional) - set(OPTIONAL_COLLECTORS)
    if unknown:
        raise ValueError(f"unknown optional collectors: {', '.join(sorted(unknown))}")
    return DEFAULT_COLLECTORS | frozenset(optional)


__all__ = [
    "BY_NAME",
    "COLLECTORS",
    "DEFAULT_COLLECTORS",
    "FAMILIES",
    "OPTIONAL_COLLECTORS",
    "Collector",
    "Family",
    "Label",
    "Scope",
    "Type",
    "collector",
    "enabled",
    "family",
]
