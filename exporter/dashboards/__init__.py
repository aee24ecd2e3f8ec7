"""Grafana dashboards, generated with grafana-foundation-sdk from the threshold config.

Two dashboards (see docs/dashboards.md), a package each with a module per row and a
function per panel:

* ``overview`` (``contention-node-overview``) — every container on a node against its
  entitlement, worst victims, active findings, node pressure, probe health;
* ``drilldown`` (``contention-container-drilldown``) — one container: usage vs request
  vs limit, throttling, PSI, run-queue heatmap and p99, blame over time and as a graph,
  memory.

Beside them: ``layout`` (rows of panels, in id order), ``panels`` (the SDK's panels
with the same datasource, units and legends), ``selectors`` (plain-string selectors,
joins and names), ``variables``, ``base`` (what both dashboards are built on),
``findings_table``, ``links`` (to the drill-down) and ``render`` (the files).
``render.render_all(thresholds)`` builds every file; the SDK (the ``dashboards`` extra)
is imported only by ``contention-exporter dashboards generate``, so the exporter itself
never needs it.
"""
