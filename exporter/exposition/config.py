"""The configuration files' reload state (``contention_config_*``): a bad edit keeps
the last good contents, and these say so."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..config_file import ConfigFileStatus


def config_families(files: Iterable[ConfigFileStatus]) -> list[Metric]:
    labels = ["kind", "file"]
    ok = GaugeMetricFamily(
        "contention_config_last_reload_successful",
        "1 if the last read of this configuration file succeeded; 0 if its current "
        "contents are bad and the last good ones are in use (logged).",
        labels=labels,
    )
    failures = CounterMetricFamily(
        "contention_config_reload_failures_total",
        "Edits of this configuration file that could not be used (each bad version "
        "counts once); the last good contents stayed in use.",
        labels=labels,
    )
    for f in files:
        ok.add_metric([f.kind, f.path], 1 if f.last_reload_ok else 0)
        failures.add_metric([f.kind, f.path], f.reload_failures_total)
    return [ok, failures]
