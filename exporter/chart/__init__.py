"""The Helm chart's alert rules and dashboards, templated on the thresholds: the chart
sets ``thresholds`` at ``helm install`` time, with no Python step, and still deploys
exactly what ``contention-exporter rules generate`` / ``dashboards generate`` make
from the same thresholds (docs/kubernetes.md, "Thresholds").

* ``kinds``: how each threshold key reaches the rules and dashboards (a number in
  PromQL and in text, a string, a list the chart applies itself, or their shape);
* ``sentinels``: the generators run on thresholds whose every value prints as text
  found nowhere else, and each place it prints is replaced by a placeholder naming
  the key and how it prints there; a second run on other sentinels must give the
  same template, so no constant was taken for a threshold and none was missed;
* ``files``: what goes into the chart (the templated rule groups and dashboards, the
  defaults and the key list its templates read, the thresholds' part of
  values.schema.json), written by scripts/generate-deploy.py.

The chart's templates (templates/_thresholds.tpl) put each value back the way Python
prints it; tests/unit/test_chart_thresholds.py renders the chart for several
threshold sets and compares with the generators' own output.
"""
