"""The Prometheus rule pack, generated from the threshold config, by concern:

* ``terms``: the PromQL terms the rules are written in (``RuleTerms``);
* ``records``: the recording rules' names; ``recording``: their expressions (signals,
  each minute's flags, the decisions, the suggested values);
* ``finding_alerts``: the findings alerts, with ``descriptions`` and ``remediations``
  (their annotations, built from the Go template fragments of ``templates``);
  ``health``: the self-monitoring alerts; ``alert``: what every alert gets;
* ``pack``: the groups and the files ``rules generate`` writes (``inhibit``: the
  Alertmanager inhibit rule beside them); ``promtool``: a thin ``promtool`` wrapper.

The PromQL facts the pack shares with the dashboards are in ``exporter.promql``.
"""

# How often Prometheus evaluates the group, unless ``rules generate --interval`` says
# otherwise; here, not in ``pack``, so the command line's defaults do not import the
# rule pack (every command's parser is built when the exporter starts).
DEFAULT_INTERVAL = "1m"
