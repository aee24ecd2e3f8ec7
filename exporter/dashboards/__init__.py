"""Grafana dashboards, generated with grafana-foundation-sdk from the threshold config.

Two dashboards (see docs/dashboards.md):

* ``contention-node-overview`` — every container on a node against its entitlement,
  worst victims, active findings, node pressure, probe health;
* ``contention-container-drilldown`` — one container: usage vs request vs limit,
  throttling, PSI, run-queue heatmap and p99, blame over time and as a graph, memory.

``render.render_all(thresholds)`` builds every file; the SDK (the ``dashboards`` extra)
is imported only by ``contention-exporter dashboards generate``, so the exporter itself
never needs it.
"""
