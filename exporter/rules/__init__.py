"""The Prometheus rule pack, generated from the threshold config (``generator``:
recording rules, alerts, the files ``rules generate`` writes), and a thin ``promtool``
wrapper. The PromQL facts it shares with the dashboards are in ``exporter.promql``."""
