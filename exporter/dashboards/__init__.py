"""Grafana dashboards, generated with grafana-foundation-sdk from the threshold config.

Two dashboards (see docs/dashboards.md):

* ``contention-node-overview`` — every container on a node against its entitlement,
  worst victims, active findings, node pressure, probe health;
* ``contention-container-drilldown`` — one container: usage vs request vs limit,
  throttling, PSI, run-queue heatmap and p99, blame over time and as a graph, memory.

``register_subcommands(subparsers)`` adds ``dashboards generate [--check]``; the SDK (the
``dashboards`` extra) is imported only when that command runs, so the exporter itself
never needs it.
"""

from __future__ import annotations

from .cli import register_subcommands

__all__ = ["register_subcommands"]
